"""Studies in SQLite."""

from __future__ import annotations

import dataclasses
import sqlite3
import time
from collections.abc import Callable, Iterable, Sequence

from tierank.resources import STUDY_DRAFT, STUDY_RUNNING
from tierank.server.storage.base import (
    ChunkAdded,
    StudyChunk,
    StudyQueryRow,
    StudyRecord,
    StudyStore,
)
from tierank.server.storage.rules import (
    BY_REQUEST_INDEX,
    STUDY_COLUMNS,
    STUDY_QUERY_COLUMNS,
    UNFINISHED_STUDIES,
    study_from_row,
    study_query_from_row,
)
from tierank.server.storage.sqlite.connection import SqliteState

# Listing leaves the report out: it can be large, and only GetStudyReport reads it.
_LISTED_COLUMNS = STUDY_COLUMNS.replace("report", "x''")
STUDY_BY_REQUEST = (
    f"SELECT {_LISTED_COLUMNS} FROM studies WHERE tenant = ? AND request_id = ? {BY_REQUEST_INDEX}"
)


class SqliteStudies(SqliteState, StudyStore):
    async def create_study(self, record: StudyRecord) -> StudyRecord:
        def write(conn: sqlite3.Connection) -> StudyRecord:
            if record.request_id:
                row = conn.execute(
                    STUDY_BY_REQUEST,
                    (record.tenant, record.request_id),
                ).fetchone()
                if row:
                    return study_from_row(row)
            values = dataclasses.astuple(record)
            conn.execute(
                f"INSERT INTO studies ({STUDY_COLUMNS}) VALUES ({', '.join('?' * len(values))})",
                values,
            )
            return record

        return await self._writer.submit(write)

    async def get_study(self, tenant: str, study_id: str) -> StudyRecord | None:
        def read(conn: sqlite3.Connection) -> StudyRecord | None:
            row = conn.execute(
                f"SELECT {_LISTED_COLUMNS} FROM studies WHERE study_id = ? AND tenant = ?",
                (study_id, tenant),
            ).fetchone()
            return study_from_row(row) if row else None

        return await self._reader.submit(read)

    async def study_report(self, tenant: str, study_id: str) -> bytes:
        def read(conn: sqlite3.Connection) -> bytes:
            row = conn.execute(
                "SELECT report FROM studies WHERE study_id = ? AND tenant = ?", (study_id, tenant)
            ).fetchone()
            return bytes(row[0]) if row else b""

        return await self._reader.submit(read)

    async def list_studies(
        self, tenant: str, page_size: int, before_study_id: str | None
    ) -> list[StudyRecord]:
        clauses, params = ["tenant = ?"], [tenant]
        if before_study_id is not None:
            clauses.append("study_id < ?")
            params.append(before_study_id)
        sql = (
            f"SELECT {_LISTED_COLUMNS} FROM studies WHERE {' AND '.join(clauses)} "
            "ORDER BY study_id DESC LIMIT ?"
        )

        def read(conn: sqlite3.Connection) -> list[StudyRecord]:
            return [study_from_row(row) for row in conn.execute(sql, (*params, page_size))]

        return await self._reader.submit(read)

    async def add_study_chunk(
        self,
        tenant: str,
        study_id: str,
        chunk: StudyChunk,
        count: Callable[[bytes], bytes | None],
    ) -> ChunkAdded:
        def write(conn: sqlite3.Connection) -> ChunkAdded:
            row = conn.execute(
                "SELECT state, inputs, start_time FROM studies WHERE study_id = ? AND tenant = ?",
                (study_id, tenant),
            ).fetchone()
            if row is None:
                return ChunkAdded.NO_STUDY
            seen = conn.execute(
                "SELECT 1 FROM study_chunks WHERE study_id = ? AND request_id = ?",
                (study_id, chunk.request_id),
            ).fetchone()
            if seen:
                return ChunkAdded.SEEN
            state, stored, start_time = row
            if state == STUDY_RUNNING or (state != STUDY_DRAFT and not start_time):
                return ChunkAdded.CLOSED
            counted = count(bytes(stored))
            if counted is None:
                return ChunkAdded.REFUSED
            conn.execute(
                "INSERT INTO study_chunks (study_id, seq, request_id, payload) VALUES (?, "
                "(SELECT COALESCE(MAX(seq), 0) + 1 FROM study_chunks WHERE study_id = ?), ?, ?)",
                (study_id, study_id, chunk.request_id, chunk.payload),
            )
            conn.execute(
                "UPDATE studies SET inputs = ?, update_time = ? WHERE study_id = ?",
                (counted, time.time(), study_id),
            )
            return ChunkAdded.ADDED

        return await self._writer.submit(write)

    async def read_study_chunks(
        self, study_id: str, skip: int = 0, limit: int | None = None
    ) -> list[bytes]:
        def read(conn: sqlite3.Connection) -> list[bytes]:
            # Chunks are numbered 1, 2, ... in the order they were added.
            rows = conn.execute(
                "SELECT payload FROM study_chunks WHERE study_id = ? AND seq > ? ORDER BY seq "
                "LIMIT ?",
                (study_id, skip, -1 if limit is None else limit),
            )
            return [bytes(row[0]) for row in rows]

        return await self._reader.submit(read)

    async def start_study(
        self,
        study_id: str,
        queries: Iterable[tuple[StudyQueryRow, bytes]],
        progress: bytes,
        record_round: Callable[[bytes], bytes],
    ) -> bool:
        def write(conn: sqlite3.Connection) -> bool:
            now = time.time()
            inputs = conn.execute(
                "SELECT inputs FROM studies WHERE study_id = ? AND state = ? "
                "AND NOT cancel_requested",
                (study_id, STUDY_DRAFT),
            ).fetchone()
            if inputs is None:
                return False
            conn.execute(
                "UPDATE studies SET state = ?, start_time = ?, update_time = ?, progress = ?, "
                "inputs = ? WHERE study_id = ?",
                (STUDY_RUNNING, now, now, progress, record_round(bytes(inputs[0])), study_id),
            )
            conn.executemany(
                "INSERT INTO study_queries (study_id, position, query_id, pool_size, pool) "
                "VALUES (?, ?, ?, ?, ?)",
                # A generator: the pools are read from where they wait one by one.
                (
                    (study_id, row.position, row.query_id, row.pool_size, pool)
                    for row, pool in queries
                ),
            )
            return True

        return await self._writer.submit(write)

    async def extend_study(
        self,
        study_id: str,
        spec: bytes,
        queries: Iterable[tuple[StudyQueryRow, bytes]],
        progress: bytes,
        record_round: Callable[[bytes], bytes],
    ) -> bool:
        def write(conn: sqlite3.Connection) -> bool:
            inputs = conn.execute(
                f"SELECT inputs FROM studies WHERE study_id = ? AND NOT {UNFINISHED_STUDIES}",
                (study_id,),
            ).fetchone()
            if inputs is None:
                return False
            conn.execute(
                "UPDATE studies SET state = ?, spec = ?, inputs = ?, progress = ?, end_time = 0, "
                "update_time = ?, cancel_requested = 0, error_code = 0, error_message = '' "
                "WHERE study_id = ?",
                (
                    STUDY_RUNNING,
                    spec,
                    record_round(bytes(inputs[0])),
                    progress,
                    time.time(),
                    study_id,
                ),
            )
            conn.executemany(
                "INSERT INTO study_queries (study_id, position, query_id, pool_size, pool, "
                "carried) VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (study_id, query_id) DO UPDATE "
                "SET pool_size = excluded.pool_size, pool = excluded.pool, job_id = '', "
                "assignment = x'', outcome = x'', carried = excluded.carried",
                # A generator: the pools are read from where they wait one by one.
                (
                    (study_id, row.position, row.query_id, row.pool_size, pool, row.carried)
                    for row, pool in queries
                ),
            )
            return True

        return await self._writer.submit(write)

    async def study_queries(
        self, study_id: str, after_position: int, limit: int, *, unfinished: bool = False
    ) -> list[StudyQueryRow]:
        sql = (
            f"SELECT {STUDY_QUERY_COLUMNS} FROM study_queries WHERE study_id = ? "
            f"AND position > ? {'AND length(outcome) = 0' if unfinished else ''} "
            "ORDER BY position LIMIT ?"
        )

        def read(conn: sqlite3.Connection) -> list[StudyQueryRow]:
            return [
                study_query_from_row(row)
                for row in conn.execute(sql, (study_id, after_position, limit))
            ]

        return await self._reader.submit(read)

    async def read_study_pool(self, study_id: str, query_id: str) -> bytes:
        def read(conn: sqlite3.Connection) -> bytes:
            row = conn.execute(
                "SELECT pool FROM study_queries WHERE study_id = ? AND query_id = ?",
                (study_id, query_id),
            ).fetchone()
            return bytes(row[0]) if row else b""

        return await self._reader.submit(read)

    async def assign_study_query(self, study_id: str, query_id: str, assignment: bytes) -> None:
        await self._set_query(study_id, query_id, "assignment", assignment)

    async def set_study_query_job(self, study_id: str, query_id: str, job_id: str) -> None:
        await self._set_query(study_id, query_id, "job_id", job_id)

    async def _set_query(self, study_id: str, query_id: str, column: str, value: object) -> None:
        def write(conn: sqlite3.Connection) -> None:
            conn.execute(
                f"UPDATE study_queries SET {column} = ? WHERE study_id = ? AND query_id = ?",
                (value, study_id, query_id),
            )

        await self._writer.submit(write)

    async def finish_study_query(
        self, study_id: str, query_id: str, outcome: bytes, progress: bytes
    ) -> None:
        def write(conn: sqlite3.Connection) -> None:
            conn.execute(
                "UPDATE study_queries SET outcome = ? WHERE study_id = ? AND query_id = ?",
                (outcome, study_id, query_id),
            )
            conn.execute(
                "UPDATE studies SET progress = ?, update_time = ? WHERE study_id = ?",
                (progress, time.time(), study_id),
            )

        await self._writer.submit(write)

    async def reopen_study_queries(
        self, study_id: str, query_ids: Sequence[str], progress: bytes
    ) -> None:
        def write(conn: sqlite3.Connection) -> None:
            conn.executemany(
                "UPDATE study_queries SET carried = outcome, outcome = x'', job_id = '', "
                "assignment = x'' WHERE study_id = ? AND query_id = ? AND length(outcome) > 0",
                [(study_id, query_id) for query_id in query_ids],
            )
            conn.execute(
                "UPDATE studies SET progress = ?, update_time = ? WHERE study_id = ?",
                (progress, time.time(), study_id),
            )

        await self._writer.submit(write)

    async def update_study_progress(self, study_id: str, progress: bytes) -> None:
        def write(conn: sqlite3.Connection) -> None:
            conn.execute(
                f"UPDATE studies SET progress = ?, update_time = ? WHERE study_id = ? AND "
                f"{UNFINISHED_STUDIES}",
                (progress, time.time(), study_id),
            )

        await self._writer.submit(write)

    async def claim_studies(self, owner: str, lease_s: float, limit: int) -> list[StudyRecord]:
        # In memory, as jobs' leases are: the file lock makes this process the database's only
        # server, so a lease of a process that held the file before (killed) must not hold up
        # its restart; within the process a lease keeps two drivers off one study.
        def read(conn: sqlite3.Connection) -> list[StudyRecord]:
            rows = conn.execute(
                f"SELECT {_LISTED_COLUMNS} FROM studies WHERE state = ? ORDER BY study_id",
                (STUDY_RUNNING,),
            )
            return [study_from_row(row) for row in rows]

        running = await self._reader.submit(read)
        now = time.time()
        leases = self._study_leases
        for gone in leases.keys() - {record.study_id for record in running}:
            del leases[gone]
        claimed: list[StudyRecord] = []
        for record in running:
            if len(claimed) >= limit:
                break
            holder, until = leases.get(record.study_id, (owner, 0.0))
            if holder == owner or until < now:
                leases[record.study_id] = (owner, now + lease_s)
                claimed.append(record)
        return claimed

    async def claim_study(self, study_id: str, owner: str, lease_s: float) -> StudyRecord | None:
        def read(conn: sqlite3.Connection) -> StudyRecord | None:
            row = conn.execute(
                f"SELECT {_LISTED_COLUMNS} FROM studies WHERE study_id = ? AND state = ?",
                (study_id, STUDY_RUNNING),
            ).fetchone()
            return study_from_row(row) if row else None

        record = await self._reader.submit(read)
        if record is None:
            self._study_leases.pop(study_id, None)
            return None
        now = time.time()
        holder, until = self._study_leases.get(study_id, (owner, 0.0))
        if holder != owner and until >= now:
            return None
        self._study_leases[study_id] = (owner, now + lease_s)
        return record

    async def request_study_cancel(self, tenant: str, study_id: str) -> bool:
        def write(conn: sqlite3.Connection) -> bool:
            marked = conn.execute(
                f"UPDATE studies SET cancel_requested = 1, update_time = ? "
                f"WHERE study_id = ? AND tenant = ? AND {UNFINISHED_STUDIES}",
                (time.time(), study_id, tenant),
            )
            return marked.rowcount > 0

        return await self._writer.submit(write)

    async def finish_study(
        self,
        study_id: str,
        state: int,
        progress: bytes,
        report: bytes,
        error_code: int = 0,
        error_message: str = "",
    ) -> bool:
        def write(conn: sqlite3.Connection) -> bool:
            now = time.time()
            ended = conn.execute(
                "UPDATE studies SET state = ?, progress = ?, report = ?, error_code = ?, "
                "error_message = ?, end_time = ?, update_time = ?, owner = '', lease_until = 0 "
                f"WHERE study_id = ? AND {UNFINISHED_STUDIES}",
                (state, progress, report, error_code, error_message, now, now, study_id),
            )
            return ended.rowcount > 0

        ended = await self._writer.submit(write)
        self._study_leases.pop(study_id, None)
        return ended

    async def replace_study_report(self, tenant: str, study_id: str, report: bytes) -> bool:
        def write(conn: sqlite3.Connection) -> bool:
            replaced = conn.execute(
                "UPDATE studies SET report = ?, update_time = ? "
                f"WHERE study_id = ? AND tenant = ? AND NOT {UNFINISHED_STUDIES}",
                (report, time.time(), study_id, tenant),
            )
            return replaced.rowcount > 0

        return await self._writer.submit(write)
