"""Jobs, their events, journal and verdicts in SQLite."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from typing import Any

from tierank.resources import FINAL_JOB_STATES
from tierank.server.errors import LeaseLost, QuotaExceeded
from tierank.server.storage.base import (
    DuplicateRequest,
    EventRow,
    JobRecord,
    JobStore,
    JobUpdate,
    JournalRow,
    Lease,
    Limits,
    VerdictAudit,
)
from tierank.server.storage.rules import (
    BY_REQUEST_INDEX,
    MIN_RETRY_AFTER_S,
    RATE_WINDOW_S,
    UNFINISHED_JOBS,
)
from tierank.server.storage.sqlite.cache import put_cache
from tierank.server.storage.sqlite.connection import SqliteState
from tierank.server.storage.sqlite.spend import settle

_NO_LIMITS = Limits()
# Another tenant's job must look like no job at all: rows of a job are read only while the job
# belongs to the caller's tenant (one primary-key lookup, evaluated once per statement).
_OWNED = "EXISTS (SELECT 1 FROM jobs WHERE jobs.job_id = ? AND jobs.tenant = ?)"
JOB_COLUMNS = (
    "job_id, tenant, request_id, state, spec, query, candidate_count, create_time, "
    "update_time, last_sequence, completion_reason, error_code, error_message, trace_context"
)
JOB_BY_REQUEST = (
    f"SELECT {JOB_COLUMNS} FROM jobs WHERE tenant = ? AND request_id = ? {BY_REQUEST_INDEX}"
)


def job_from_row(row: sqlite3.Row | tuple[Any, ...]) -> JobRecord:
    return JobRecord(*row)


def read_job(conn: sqlite3.Connection, tenant: str, job_id: str) -> JobRecord | None:
    row = conn.execute(
        f"SELECT {JOB_COLUMNS} FROM jobs WHERE job_id = ? AND tenant = ?", (job_id, tenant)
    ).fetchone()
    return job_from_row(row) if row else None


def read_unfinished(conn: sqlite3.Connection) -> list[JobRecord]:
    rows = conn.execute(f"SELECT {JOB_COLUMNS} FROM jobs WHERE {UNFINISHED_JOBS} ORDER BY job_id")
    return [job_from_row(r) for r in rows]


class SqliteJobs(SqliteState, JobStore):
    async def create_job(
        self,
        job: JobRecord,
        first_event: EventRow,
        limits: Limits = _NO_LIMITS,
        journal: Sequence[JournalRow] = (),
    ) -> JobRecord:
        def write(conn: sqlite3.Connection) -> JobRecord | None:
            if job.request_id:
                row = conn.execute(
                    JOB_BY_REQUEST,
                    (job.tenant, job.request_id),
                ).fetchone()
                if row:
                    return job_from_row(row)
            _check_job_quotas(conn, job, limits)
            conn.execute(
                f"INSERT INTO jobs ({JOB_COLUMNS}) VALUES ({', '.join('?' * 14)})",
                (
                    job.job_id,
                    job.tenant,
                    job.request_id,
                    job.state,
                    job.spec,
                    job.query,
                    job.candidate_count,
                    job.create_time,
                    job.update_time,
                    first_event.sequence,
                    job.completion_reason,
                    job.error_code,
                    job.error_message,
                    job.trace_context,
                ),
            )
            _insert_events(conn, job.job_id, [first_event])
            _insert_journal(conn, job.job_id, journal)
            return None

        existing = await self._writer.submit(write)
        if existing is not None:
            raise DuplicateRequest(existing)
        return JobRecord(**{**job.__dict__, "last_sequence": first_event.sequence})

    async def get_job(self, tenant: str, job_id: str) -> JobRecord | None:
        return await self._reader.submit(lambda conn: read_job(conn, tenant, job_id))

    async def list_jobs(
        self, tenant: str, state: int | None, page_size: int, before_job_id: str | None
    ) -> list[JobRecord]:
        clauses: list[str] = ["tenant = ?"]
        params: list[object] = [tenant]
        if state is not None:
            clauses.append("state = ?")
            params.append(state)
        if before_job_id is not None:
            clauses.append("job_id < ?")
            params.append(before_job_id)
        sql = (
            f"SELECT {JOB_COLUMNS} FROM jobs WHERE {' AND '.join(clauses)} "
            "ORDER BY job_id DESC LIMIT ?"
        )

        def read(conn: sqlite3.Connection) -> list[JobRecord]:
            return [job_from_row(r) for r in conn.execute(sql, (*params, page_size))]

        return await self._reader.submit(read)

    async def unfinished_jobs(self) -> list[JobRecord]:
        return await self._reader.submit(read_unfinished)

    async def commit(self, job_id: str, update: JobUpdate, fence: Lease | None = None) -> None:
        if fence is not None and self._leases.get(job_id) != fence.epoch:
            raise LeaseLost(f"job {job_id} is not leased to {fence.owner} any more")

        def write(conn: sqlite3.Connection) -> None:
            _insert_events(conn, job_id, update.events)
            _insert_journal(conn, job_id, update.journal)
            put_cache(conn, update.cache)
            for settlement in update.settlements:
                settle(conn, settlement)
            conn.executemany(
                "INSERT INTO verdict_audit (job_id, call_id, verdict, prompt, raw_answer) "
                "VALUES (?, ?, ?, ?, ?)",
                [(job_id, a.call_id, a.verdict, a.prompt, a.raw_answer) for a in update.audit],
            )
            sets, params = [], []
            if update.events:
                last = update.events[-1]
                sets += ["last_sequence = ?", "update_time = ?"]
                params += [last.sequence, last.time]
            for column in ("state", "completion_reason", "error_code", "error_message"):
                value = getattr(update, column)
                if value is not None:
                    sets.append(f"{column} = ?")
                    params.append(value)
            if sets:
                conn.execute(
                    f"UPDATE jobs SET {', '.join(sets)} WHERE job_id = ?", (*params, job_id)
                )

        await self._writer.submit(write)
        if update.state in FINAL_JOB_STATES:
            self._cancel_requested.discard(job_id)

    async def read_events(
        self, tenant: str, job_id: str, after_sequence: int, limit: int, max_bytes: int
    ) -> list[EventRow]:
        def read(conn: sqlite3.Connection) -> list[EventRow]:
            rows = conn.execute(
                "SELECT sequence, kind, time, payload FROM events "
                f"WHERE job_id = ? AND sequence > ? AND {_OWNED} ORDER BY sequence LIMIT ?",
                (job_id, after_sequence, job_id, tenant, limit),
            )
            page: list[EventRow] = []
            total = 0
            for row in rows:
                total += len(row[3])
                if page and total > max_bytes:
                    break
                page.append(EventRow(*row))
            return page

        return await self._reader.submit(read)

    async def latest_event(self, tenant: str, job_id: str, kinds: Sequence[str]) -> EventRow | None:
        marks = ", ".join("?" * len(kinds))

        def read(conn: sqlite3.Connection) -> EventRow | None:
            row = conn.execute(
                "SELECT sequence, kind, time, payload FROM events "
                f"WHERE job_id = ? AND kind IN ({marks}) AND {_OWNED} "
                "ORDER BY sequence DESC LIMIT 1",
                (job_id, *kinds, job_id, tenant),
            ).fetchone()
            return EventRow(*row) if row else None

        return await self._reader.submit(read)

    async def read_journal(self, job_id: str) -> list[JournalRow]:
        def read(conn: sqlite3.Connection) -> list[JournalRow]:
            rows = conn.execute(
                "SELECT idx, kind, payload FROM journal WHERE job_id = ? ORDER BY idx", (job_id,)
            )
            return [JournalRow(*r) for r in rows]

        return await self._reader.submit(read)

    async def read_audit(self, tenant: str, job_id: str, call_id: str) -> VerdictAudit | None:
        def read(conn: sqlite3.Connection) -> VerdictAudit | None:
            row = conn.execute(
                "SELECT call_id, verdict, prompt, raw_answer FROM verdict_audit "
                f"WHERE job_id = ? AND call_id = ? AND {_OWNED}",
                (job_id, call_id, job_id, tenant),
            ).fetchone()
            return VerdictAudit(*row) if row else None

        return await self._reader.submit(read)

    async def read_verdicts(self, job_id: str, call_ids: Sequence[str]) -> dict[str, bytes]:
        def read(conn: sqlite3.Connection) -> dict[str, bytes]:
            marks = ", ".join("?" * len(call_ids))
            rows = conn.execute(
                f"SELECT call_id, verdict FROM verdict_audit WHERE job_id = ? "
                f"AND call_id IN ({marks})",
                (job_id, *call_ids),
            )
            return dict(rows.fetchall())

        return await self._reader.submit(read) if call_ids else {}


def _insert_events(conn: sqlite3.Connection, job_id: str, events: Sequence[EventRow]) -> None:
    conn.executemany(
        "INSERT INTO events (job_id, sequence, kind, time, payload) VALUES (?, ?, ?, ?, ?)",
        [(job_id, e.sequence, e.kind, e.time, e.payload) for e in events],
    )


def _check_job_quotas(conn: sqlite3.Connection, job: JobRecord, limits: Limits) -> None:
    if limits.max_concurrent_jobs is not None:
        (unfinished,) = conn.execute(
            f"SELECT COUNT(*) FROM jobs WHERE tenant = ? AND {UNFINISHED_JOBS}", (job.tenant,)
        ).fetchone()
        if unfinished >= limits.max_concurrent_jobs:
            raise QuotaExceeded("max_concurrent_jobs", limits.max_concurrent_jobs)
    if limits.jobs_per_minute is not None:
        window_start = job.create_time - RATE_WINDOW_S
        (recent,) = conn.execute(
            "SELECT COUNT(*) FROM jobs WHERE tenant = ? AND create_time > ?",
            (job.tenant, window_start),
        ).fetchone()
        if recent >= limits.jobs_per_minute:
            # One more fits once all but `jobs_per_minute - 1` of the window's jobs have left
            # it: usually that is the oldest, unless the limit was lowered meanwhile.
            leaving = conn.execute(
                "SELECT create_time FROM jobs WHERE tenant = ? AND create_time > ? "
                "ORDER BY create_time LIMIT 1 OFFSET ?",
                (job.tenant, window_start, recent - limits.jobs_per_minute),
            ).fetchone()
            retry_after = (
                max(leaving[0] + RATE_WINDOW_S - job.create_time, MIN_RETRY_AFTER_S)
                if leaving
                else None  # a limit of zero: waiting never helps
            )
            raise QuotaExceeded("jobs_per_minute", limits.jobs_per_minute, retry_after)


def _insert_journal(conn: sqlite3.Connection, job_id: str, rows: Sequence[JournalRow]) -> None:
    conn.executemany(
        "INSERT INTO journal (job_id, idx, kind, payload) VALUES (?, ?, ?, ?)",
        [(job_id, j.index, j.kind, j.payload) for j in rows],
    )
