"""Long-running operations in SQLite."""

from __future__ import annotations

import dataclasses
import sqlite3
import time
from collections.abc import Sequence
from typing import Any

from tierank.server.storage.base import OperationRecord, OperationStore
from tierank.server.storage.rules import BY_REQUEST_INDEX, UNFINISHED_JOBS, operation_from_row
from tierank.server.storage.sqlite.connection import SqliteState

_OPERATION_COLUMNS = (
    "operation_id, tenant, request_id, request_digest, method, state, owner, create_time, "
    "update_time, progress, result, error_code, error_message, cancel_requested"
)


OPERATION_BY_REQUEST = (
    f"SELECT {_OPERATION_COLUMNS} FROM operations WHERE tenant = ? AND request_id = ? "
    f"{BY_REQUEST_INDEX}"
)


def _operation(row: Sequence[Any]) -> OperationRecord:
    return operation_from_row(row, row[12])


class SqliteOperations(SqliteState, OperationStore):
    async def create_operation(self, record: OperationRecord) -> OperationRecord:
        def write(conn: sqlite3.Connection) -> OperationRecord:
            if record.request_id:
                row = conn.execute(
                    OPERATION_BY_REQUEST,
                    (record.tenant, record.request_id),
                ).fetchone()
                if row:
                    return _operation(row)
            conn.execute(
                f"INSERT INTO operations ({_OPERATION_COLUMNS}) VALUES ({', '.join('?' * 14)})",
                dataclasses.astuple(record),
            )
            return record

        return await self._writer.submit(write)

    async def get_operation(self, tenant: str, operation_id: str) -> OperationRecord | None:
        def read(conn: sqlite3.Connection) -> OperationRecord | None:
            row = conn.execute(
                f"SELECT {_OPERATION_COLUMNS} FROM operations "
                "WHERE operation_id = ? AND tenant = ?",
                (operation_id, tenant),
            ).fetchone()
            return _operation(row) if row else None

        return await self._reader.submit(read)

    async def list_operations(
        self, tenant: str, page_size: int, before_operation_id: str | None
    ) -> list[OperationRecord]:
        columns = _OPERATION_COLUMNS.replace("result", "x''")
        clauses, params = ["tenant = ?"], [tenant]
        if before_operation_id is not None:
            clauses.append("operation_id < ?")
            params.append(before_operation_id)
        sql = (
            f"SELECT {columns} FROM operations WHERE {' AND '.join(clauses)} "
            "ORDER BY operation_id DESC LIMIT ?"
        )

        def read(conn: sqlite3.Connection) -> list[OperationRecord]:
            rows = conn.execute(sql, (*params, page_size)).fetchall()
            return [_operation(row) for row in rows]

        return await self._reader.submit(read)

    async def update_operation(self, operation_id: str, owner: str, progress: bytes) -> bool:
        def write(conn: sqlite3.Connection) -> bool:
            row = conn.execute(
                "UPDATE operations SET progress = ?, update_time = ? "
                f"WHERE operation_id = ? AND owner = ? AND {UNFINISHED_JOBS} "
                "RETURNING cancel_requested",
                (progress, time.time(), operation_id, owner),
            ).fetchone()
            return bool(row and row[0])

        return await self._writer.submit(write)

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
        def write(conn: sqlite3.Connection) -> None:
            conn.execute(
                "UPDATE operations SET state = ?, progress = ?, result = ?, error_code = ?, "
                "error_message = ?, update_time = ? "
                f"WHERE operation_id = ? AND owner = ? AND {UNFINISHED_JOBS}",
                (
                    state,
                    progress,
                    result,
                    error_code,
                    error_message,
                    time.time(),
                    operation_id,
                    owner,
                ),
            )

        await self._writer.submit(write)

    async def request_operation_cancel(self, tenant: str, operation_id: str) -> bool:
        def write(conn: sqlite3.Connection) -> bool:
            marked = conn.execute(
                "UPDATE operations SET cancel_requested = 1 "
                f"WHERE operation_id = ? AND tenant = ? AND {UNFINISHED_JOBS}",
                (operation_id, tenant),
            )
            return marked.rowcount > 0

        return await self._writer.submit(write)

    async def end_orphaned_operations(
        self, replica: str, state: int, error_code: int, error_message: str
    ) -> int:
        # The file lock makes this process the database's only server: an operation another
        # replica id owns was left by a process that is gone.
        def write(conn: sqlite3.Connection) -> int:
            ended = conn.execute(
                "UPDATE operations SET state = ?, error_code = ?, error_message = ?, "
                f"update_time = ? WHERE owner <> ? AND {UNFINISHED_JOBS}",
                (state, error_code, error_message, time.time(), replica),
            )
            return ended.rowcount

        return await self._writer.submit(write)
