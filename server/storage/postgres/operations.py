"""Long-running operations in PostgreSQL."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from tierank.server.storage.base import OperationRecord, OperationStore
from tierank.server.storage.postgres.connection import LIVE, NOW, PostgresConnection, text
from tierank.server.storage.rules import BY_REQUEST_INDEX, UNFINISHED_JOBS, operation_from_row

_OPERATION_COLUMNS = (
    "operation_id, tenant, request_id, request_digest, method, state, owner, create_time, "
    "update_time, progress, result, error_code, error_message, cancel_requested"
)
# Operations take their states from jobs' (JobState), so "unfinished" is the same predicate.
_UNFINISHED_OPERATION = UNFINISHED_JOBS


def _operation(row: Sequence[Any]) -> OperationRecord:
    return operation_from_row(row, text(row[12]))


class PostgresOperations(PostgresConnection, OperationStore):
    async def create_operation(self, record: OperationRecord) -> OperationRecord:
        values = dataclasses.astuple(record)
        row = await self._fetchone(
            f"INSERT INTO operations ({_OPERATION_COLUMNS}) "
            f"VALUES ({', '.join(['%s'] * len(values))}) "
            "ON CONFLICT (tenant, request_id) WHERE request_id <> '' DO NOTHING "
            "RETURNING operation_id",
            (*values[:12], record.error_message.encode(), record.cancel_requested),
        )
        if row is not None:
            return record
        existing = await self._fetchone(
            f"SELECT {_OPERATION_COLUMNS} FROM operations WHERE tenant = %s AND request_id = %s "
            f"{BY_REQUEST_INDEX}",
            (record.tenant, record.request_id),
        )
        return _operation(existing)

    async def get_operation(self, tenant: str, operation_id: str) -> OperationRecord | None:
        row = await self._fetchone(
            f"SELECT {_OPERATION_COLUMNS} FROM operations WHERE operation_id = %s AND tenant = %s",
            (operation_id, tenant),
        )
        return _operation(row) if row else None

    async def list_operations(
        self, tenant: str, page_size: int, before_operation_id: str | None
    ) -> list[OperationRecord]:
        columns = _OPERATION_COLUMNS.replace("result", "''::bytea")
        rows = await self._fetchall(
            f"SELECT {columns} FROM operations WHERE tenant = %(tenant)s "
            "AND (%(before)s::text IS NULL OR operation_id < %(before)s) "
            "ORDER BY operation_id DESC LIMIT %(limit)s",
            {"tenant": tenant, "before": before_operation_id, "limit": page_size},
        )
        return [_operation(row) for row in rows]

    async def update_operation(self, operation_id: str, owner: str, progress: bytes) -> bool:
        row = await self._fetchone(
            f"UPDATE operations SET progress = %s, update_time = {NOW} "
            f"WHERE operation_id = %s AND owner = %s AND {_UNFINISHED_OPERATION} "
            "RETURNING cancel_requested",
            (progress, operation_id, owner),
        )
        return bool(row and row[0])

    async def finish_operation(
        self,
        operation_id: str,
        owner: str,
        state: int,
        progress: bytes,
        result: bytes = b"",
        error_code: int = 0,
        error_message: str = "",
    ) -> None:
        await self._execute(
            "UPDATE operations SET state = %s, progress = %s, result = %s, error_code = %s, "
            f"error_message = %s, update_time = {NOW} "
            f"WHERE operation_id = %s AND owner = %s AND {_UNFINISHED_OPERATION}",
            (
                state,
                progress,
                result,
                error_code,
                error_message.encode(),
                operation_id,
                owner,
            ),
        )

    async def request_operation_cancel(self, tenant: str, operation_id: str) -> bool:
        row = await self._fetchone(
            "WITH marked AS (UPDATE operations SET cancel_requested = TRUE "
            f"WHERE operation_id = %s AND tenant = %s AND {_UNFINISHED_OPERATION} "
            "RETURNING 1) SELECT COUNT(*) FROM marked",
            (operation_id, tenant),
        )
        return bool(row[0])

    async def end_orphaned_operations(
        self, replica: str, state: int, error_code: int, error_message: str
    ) -> int:
        row = await self._fetchone(
            "WITH ended AS (UPDATE operations o SET state = %(state)s, error_code = %(code)s, "
            f"error_message = %(message)s, update_time = {NOW} "
            f"WHERE {_UNFINISHED_OPERATION} AND owner <> %(replica)s AND NOT EXISTS "
            f"(SELECT 1 FROM replicas r WHERE r.replica_id = o.owner AND r.{LIVE}) "
            "RETURNING 1) SELECT COUNT(*) FROM ended",
            {
                "state": state,
                "code": error_code,
                "message": error_message.encode(),
                "replica": replica,
            },
        )
        return int(row[0])
