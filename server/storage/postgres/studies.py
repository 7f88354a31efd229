"""Studies in PostgreSQL."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from tierank.resources import STUDY_DRAFT, STUDY_RUNNING
from tierank.server.storage.base import (
    ChunkAdded,
    StudyChunk,
    StudyQueryRow,
    StudyRecord,
    StudyStore,
)
from tierank.server.storage.postgres.connection import NOW, PostgresConnection, text
from tierank.server.storage.rules import (
    BY_REQUEST_INDEX,
    STUDY_COLUMNS,
    STUDY_QUERY_COLUMNS,
    UNFINISHED_STUDIES,
    study_from_row,
    study_query_from_row,
)

# Listing leaves the report out: it can be large, and only GetStudyReport reads it.
_LISTED_COLUMNS = STUDY_COLUMNS.replace("report", "''::bytea")


def _study(row: Sequence[Any]) -> StudyRecord:
    return study_from_row(row, text(row[12]))


class PostgresStudies(PostgresConnection, StudyStore):
    async def create_study(self, record: StudyRecord) -> StudyRecord:
        values = dataclasses.astuple(record)
        stored = (*values[:12], record.error_message.encode(), *values[13:])
        row = await self._fetchone(
            f"INSERT INTO studies ({STUDY_COLUMNS}) VALUES ({', '.join(['%s'] * len(values))}) "
            "ON CONFLICT (tenant, request_id) WHERE request_id <> '' DO NOTHING "
            "RETURNING study_id",
            stored,
        )
        if row is not None:
            return record
        existing = await self._fetchone(
            f"SELECT {_LISTED_COLUMNS} FROM studies WHERE tenant = %s AND request_id = %s "
            f"{BY_REQUEST_INDEX}",
            (record.tenant, record.request_id),
        )
        return _study(existing)

    async def get_study(self, tenant: str, study_id: str) -> StudyRecord | None:
        row = await self._fetchone(
            f"SELECT {_LISTED_COLUMNS} FROM studies WHERE study_id = %s AND tenant = %s",
            (study_id, tenant),
        )
        return _study(row) if row else None

    async def study_report(self, tenant: str, study_id: str) -> bytes:
        row = await self._fetchone(
            "SELECT report FROM studies WHERE study_id = %s AND tenant = %s", (study_id, tenant)
        )
        return bytes(row[0]) if row else b""

    async def list_studies(
        self, tenant: str, page_size: int, before_study_id: str | None
    ) -> list[StudyRecord]:
        rows = await self._fetchall(
            f"SELECT {_LISTED_COLUMNS} FROM studies WHERE tenant = %(tenant)s "
            "AND (%(before)s::text IS NULL OR study_id < %(before)s) "
            "ORDER BY study_id DESC LIMIT %(limit)s",
            {"tenant": tenant, "before": before_study_id, "limit": page_size},
        )
        return [_study(row) for row in rows]

    async def add_study_chunk(
        self,
        tenant: str,
        study_id: str,
        chunk: StudyChunk,
        count: Callable[[bytes], bytes | None],
    ) -> ChunkAdded:
        async with self._transaction() as conn:
            # The study's row locked: chunks of one study are numbered one at a time.
            cursor = await conn.execute(
                "SELECT state, inputs, start_time FROM studies WHERE study_id = %s "
                "AND tenant = %s FOR UPDATE",
                (study_id, tenant),
            )
            row = await cursor.fetchone()
            if row is None:
                return ChunkAdded.NO_STUDY
            cursor = await conn.execute(
                "SELECT 1 FROM study_chunks WHERE study_id = %s AND request_id = %s",
                (study_id, chunk.request_id),
            )
            if await cursor.fetchone():
                return ChunkAdded.SEEN
            state, stored, start_time = row
            if state == STUDY_RUNNING or (state != STUDY_DRAFT and not start_time):
                return ChunkAdded.CLOSED
            counted = count(bytes(stored))
            if counted is None:
                return ChunkAdded.REFUSED
            await conn.execute(
                "INSERT INTO study_chunks (study_id, seq, request_id, payload) VALUES (%s, "
                "(SELECT COALESCE(MAX(seq), 0) + 1 FROM study_chunks WHERE study_id = %s), "
                "%s, %s)",
                (study_id, study_id, chunk.request_id, chunk.payload),
            )
            await conn.execute(
                f"UPDATE studies SET inputs = %s, update_time = {NOW} WHERE study_id = %s",
                (counted, study_id),
            )
            return ChunkAdded.ADDED

    async def read_study_chunks(
        self, study_id: str, skip: int = 0, limit: int | None = None
    ) -> list[bytes]:
        # Chunks are numbered 1, 2, ... in the order they were added.
        rows = await self._fetchall(
            "SELECT payload FROM study_chunks WHERE study_id = %s AND seq > %s ORDER BY seq "
            "LIMIT %s",
            (study_id, skip, limit),
        )
        return [bytes(row[0]) for row in rows]

    async def start_study(
        self,
        study_id: str,
        queries: Iterable[tuple[StudyQueryRow, bytes]],
        progress: bytes,
        record_round: Callable[[bytes], bytes],
    ) -> bool:
        async with self._transaction() as conn:
            cursor = await conn.execute(
                "SELECT inputs FROM studies WHERE study_id = %s AND state = %s "
                "AND NOT cancel_requested FOR UPDATE",
                (study_id, STUDY_DRAFT),
            )
            inputs = await cursor.fetchone()
            if inputs is None:
                return False
            await conn.execute(
                f"UPDATE studies SET state = %s, start_time = {NOW}, update_time = {NOW}, "
                "progress = %s, inputs = %s WHERE study_id = %s",
                (STUDY_RUNNING, progress, record_round(bytes(inputs[0])), study_id),
            )
            async with conn.cursor() as rows:
                await rows.executemany(
                    "INSERT INTO study_queries (study_id, position, query_id, pool_size, "
                    "pool) VALUES (%s, %s, %s, %s, %s)",
                    # A generator: the pools are read from where they wait one by one.
                    (
                        (study_id, row.position, row.query_id, row.pool_size, pool)
                        for row, pool in queries
                    ),
                )
            return True

    async def extend_study(
        self,
        study_id: str,
        spec: bytes,
        queries: Iterable[tuple[StudyQueryRow, bytes]],
        progress: bytes,
        record_round: Callable[[bytes], bytes],
    ) -> bool:
        async with self._transaction() as conn:
            cursor = await conn.execute(
                f"SELECT inputs FROM studies WHERE study_id = %s AND NOT {UNFINISHED_STUDIES} "
                "FOR UPDATE",
                (study_id,),
            )
            inputs = await cursor.fetchone()
            if inputs is None:
                return False
            await conn.execute(
                f"UPDATE studies SET state = %s, spec = %s, inputs = %s, progress = %s, "
                f"end_time = 0, update_time = {NOW}, cancel_requested = FALSE, error_code = 0, "
                "error_message = ''::bytea WHERE study_id = %s",
                (STUDY_RUNNING, spec, record_round(bytes(inputs[0])), progress, study_id),
            )
            async with conn.cursor() as rows:
                await rows.executemany(
                    "INSERT INTO study_queries (study_id, position, query_id, pool_size, pool, "
                    "carried) VALUES (%s, %s, %s, %s, %s, %s) ON CONFLICT (study_id, query_id) "
                    "DO UPDATE SET pool_size = excluded.pool_size, pool = excluded.pool, "
                    "job_id = '', assignment = '', outcome = '', carried = excluded.carried",
                    # A generator: the pools are read from where they wait one by one.
                    (
                        (study_id, row.position, row.query_id, row.pool_size, pool, row.carried)
                        for row, pool in queries
                    ),
                )
            return True

    async def study_queries(
        self, study_id: str, after_position: int, limit: int, *, unfinished: bool = False
    ) -> list[StudyQueryRow]:
        rows = await self._fetchall(
            f"SELECT {STUDY_QUERY_COLUMNS} FROM study_queries WHERE study_id = %s "
            f"AND position > %s {'AND length(outcome) = 0' if unfinished else ''} "
            "ORDER BY position LIMIT %s",
            (study_id, after_position, limit),
        )
        return [study_query_from_row(row) for row in rows]

    async def read_study_pool(self, study_id: str, query_id: str) -> bytes:
        row = await self._fetchone(
            "SELECT pool FROM study_queries WHERE study_id = %s AND query_id = %s",
            (study_id, query_id),
        )
        return bytes(row[0]) if row else b""

    async def assign_study_query(self, study_id: str, query_id: str, assignment: bytes) -> None:
        await self._execute(
            "UPDATE study_queries SET assignment = %s WHERE study_id = %s AND query_id = %s",
            (assignment, study_id, query_id),
        )

    async def set_study_query_job(self, study_id: str, query_id: str, job_id: str) -> None:
        await self._execute(
            "UPDATE study_queries SET job_id = %s WHERE study_id = %s AND query_id = %s",
            (job_id, study_id, query_id),
        )

    async def finish_study_query(
        self, study_id: str, query_id: str, outcome: bytes, progress: bytes
    ) -> None:
        async with self._transaction() as conn:
            await conn.execute(
                "UPDATE study_queries SET outcome = %s WHERE study_id = %s AND query_id = %s",
                (outcome, study_id, query_id),
            )
            await conn.execute(
                f"UPDATE studies SET progress = %s, update_time = {NOW} WHERE study_id = %s",
                (progress, study_id),
            )

    async def reopen_study_queries(
        self, study_id: str, query_ids: Sequence[str], progress: bytes
    ) -> None:
        async with self._transaction() as conn:
            await conn.execute(
                "UPDATE study_queries SET carried = outcome, outcome = '', job_id = '', "
                "assignment = '' WHERE study_id = %s AND query_id = ANY(%s) "
                "AND length(outcome) > 0",
                (study_id, list(query_ids)),
            )
            await conn.execute(
                f"UPDATE studies SET progress = %s, update_time = {NOW} WHERE study_id = %s",
                (progress, study_id),
            )

    async def update_study_progress(self, study_id: str, progress: bytes) -> None:
        await self._execute(
            f"UPDATE studies SET progress = %s, update_time = {NOW} "
            f"WHERE study_id = %s AND {UNFINISHED_STUDIES}",
            (progress, study_id),
        )

    async def claim_studies(self, owner: str, lease_s: float, limit: int) -> list[StudyRecord]:
        rows = await self._fetchall(
            f"UPDATE studies SET owner = %(owner)s, lease_until = {NOW} + %(lease)s "
            "WHERE study_id IN (SELECT study_id FROM studies WHERE state = %(running)s "
            f"AND (lease_until < {NOW} OR owner = %(owner)s) ORDER BY study_id "
            f"LIMIT %(limit)s FOR UPDATE SKIP LOCKED) RETURNING {_LISTED_COLUMNS}",
            {"owner": owner, "lease": lease_s, "running": STUDY_RUNNING, "limit": limit},
        )
        return [_study(row) for row in rows]

    async def claim_study(self, study_id: str, owner: str, lease_s: float) -> StudyRecord | None:
        row = await self._fetchone(
            f"UPDATE studies SET owner = %(owner)s, lease_until = {NOW} + %(lease)s "
            "WHERE study_id = %(study)s AND state = %(running)s "
            f"AND (lease_until < {NOW} OR owner = %(owner)s) RETURNING {_LISTED_COLUMNS}",
            {"owner": owner, "lease": lease_s, "running": STUDY_RUNNING, "study": study_id},
        )
        return _study(row) if row else None

    async def request_study_cancel(self, tenant: str, study_id: str) -> bool:
        row = await self._fetchone(
            f"WITH marked AS (UPDATE studies SET cancel_requested = TRUE, update_time = {NOW} "
            f"WHERE study_id = %s AND tenant = %s AND {UNFINISHED_STUDIES} RETURNING 1) "
            "SELECT COUNT(*) FROM marked",
            (study_id, tenant),
        )
        return bool(row[0])

    async def finish_study(
        self,
        study_id: str,
        state: int,
        progress: bytes,
        report: bytes,
        error_code: int = 0,
        error_message: str = "",
    ) -> bool:
        row = await self._fetchone(
            "WITH ended AS (UPDATE studies SET state = %s, progress = %s, report = %s, "
            f"error_code = %s, error_message = %s, end_time = {NOW}, update_time = {NOW}, "
            f"owner = '', lease_until = 0 WHERE study_id = %s AND {UNFINISHED_STUDIES} "
            "RETURNING 1) "
            "SELECT COUNT(*) FROM ended",
            (state, progress, report, error_code, error_message.encode(), study_id),
        )
        return bool(row[0])

    async def replace_study_report(self, tenant: str, study_id: str, report: bytes) -> bool:
        row = await self._fetchone(
            f"WITH replaced AS (UPDATE studies SET report = %s, update_time = {NOW} "
            f"WHERE study_id = %s AND tenant = %s AND NOT {UNFINISHED_STUDIES} RETURNING 1) "
            "SELECT COUNT(*) FROM replaced",
            (report, study_id, tenant),
        )
        return bool(row[0])
