"""Jobs, their events, journal and verdicts in PostgreSQL."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import psycopg

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
    Settlement,
    VerdictAudit,
)
from tierank.server.storage.postgres.cache import CACHE_CONFLICT, CACHE_SELECT, cache_arrays
from tierank.server.storage.postgres.connection import JOB_QUOTA_LOCK, PostgresConnection, text
from tierank.server.storage.postgres.spend import ADD_USAGE
from tierank.server.storage.rules import (
    BY_REQUEST_INDEX,
    MIN_RETRY_AFTER_S,
    RATE_WINDOW_S,
    UNFINISHED_JOBS,
)

_NO_LIMITS = Limits()
JOB_COLUMNS = (
    "job_id, tenant, request_id, state, spec, query, candidate_count, create_time, "
    "update_time, last_sequence, completion_reason, error_code, error_message, trace_context"
)
# Another tenant's job must look like no job at all: rows of a job are read only while the job
# belongs to the caller's tenant.
_OWNED = "EXISTS (SELECT 1 FROM jobs WHERE jobs.job_id = %(job)s AND jobs.tenant = %(tenant)s)"
# Rows go in as one array per column: a statement's text does not depend on how many rows it
# carries, so the server prepares it once and reuses the plan.
_INSERT_EVENTS = (
    "INSERT INTO events (job_id, sequence, kind, time, payload) SELECT %(job)s, * FROM "
    "unnest(%(sequences)s::bigint[], %(kinds)s::text[], %(times)s::float8[], "
    "%(payloads)s::bytea[]) AS new_event"
)
_INSERT_JOURNAL = (
    "INSERT INTO journal (job_id, idx, kind, payload) SELECT %(job)s, * FROM "
    "unnest(%(indexes)s::bigint[], %(journal_kinds)s::text[], %(journal_payloads)s::bytea[]) "
    "AS new_row"
)
# A commit is one statement: all of it or nothing, in one round trip. Every data-modifying
# part of a WITH runs, referenced or not; a job column whose value is NULL keeps its value.
# A fenced commit first locks the job's row if its lease epoch is still the one given (a claim
# by another replica waits for this commit, or this commit sees the claim and writes nothing);
# an unfenced one (epoch NULL) writes unconditionally.
_ALLOWED = "(%(epoch)s::bigint IS NULL OR EXISTS (SELECT 1 FROM fence))"
_COMMIT = f"""
WITH fence AS MATERIALIZED (
    SELECT job_id FROM jobs WHERE job_id = %(job)s AND lease_epoch = %(epoch)s::bigint FOR UPDATE
),
new_events AS ({_INSERT_EVENTS} WHERE {_ALLOWED}),
new_journal AS ({_INSERT_JOURNAL} WHERE {_ALLOWED}),
new_cache AS ({CACHE_SELECT} WHERE {_ALLOWED} {CACHE_CONFLICT}),
new_audit AS (
    INSERT INTO verdict_audit (job_id, call_id, verdict, prompt, raw_answer)
    SELECT %(job)s, * FROM unnest(%(calls)s::text[], %(verdicts)s::bytea[],
        %(prompts)s::bytea[], %(answers)s::bytea[])
    WHERE {_ALLOWED}
),
settled AS (
    SELECT * FROM unnest(%(settled_ids)s::text[], %(settled_calls)s::bigint[],
        %(settled_input)s::bigint[], %(settled_output)s::bigint[], %(settled_cost)s::float8[])
        AS s(reservation_id, calls, input_tokens, output_tokens, cost_usd)
),
released AS (
    DELETE FROM reservations WHERE reservation_id IN (SELECT reservation_id FROM settled)
    AND {_ALLOWED} RETURNING reservation_id, tenant, day, judge
),
new_usage AS (
    -- One INSERT may not update a row twice: the settlements of one (tenant, day, judge) are
    -- summed first.
    INSERT INTO usage (tenant, day, judge, calls, input_tokens, output_tokens, cost_usd)
    SELECT tenant, day, judge, SUM(calls), SUM(input_tokens), SUM(output_tokens), SUM(cost_usd)
    FROM released JOIN settled USING (reservation_id) GROUP BY tenant, day, judge {ADD_USAGE}
),
job AS (
    UPDATE jobs SET
        last_sequence = COALESCE(%(last_sequence)s::bigint, last_sequence),
        update_time = COALESCE(%(update_time)s::float8, update_time),
        state = COALESCE(%(state)s::integer, state),
        completion_reason = COALESCE(%(completion_reason)s::integer, completion_reason),
        error_code = COALESCE(%(error_code)s::integer, error_code),
        error_message = COALESCE(%(error_message)s::bytea, error_message)
    WHERE job_id = %(job)s AND %(changes_job)s AND {_ALLOWED}
)
SELECT {_ALLOWED}, CASE WHEN %(last_sequence)s::bigint IS NOT NULL AND {_ALLOWED}
    THEN pg_notify(%(channel)s, 'events ' || %(job)s || ' ' || %(last_sequence)s::bigint) END
"""


def job_from_row(row: Sequence[Any]) -> JobRecord:
    (job_id, tenant, request_id, state, spec, query, count, created, updated, *rest) = row
    last_sequence, completion_reason, error_code, error_message, trace_context = rest
    return JobRecord(
        job_id=job_id,
        tenant=tenant,
        request_id=request_id,
        state=state,
        spec=bytes(spec),
        query=text(query),
        candidate_count=count,
        create_time=created,
        update_time=updated,
        last_sequence=last_sequence,
        completion_reason=completion_reason,
        error_code=error_code,
        error_message=text(error_message),
        trace_context=trace_context,
    )


class PostgresJobs(PostgresConnection, JobStore):
    async def create_job(
        self,
        job: JobRecord,
        first_event: EventRow,
        limits: Limits = _NO_LIMITS,
        journal: Sequence[JournalRow] = (),
    ) -> JobRecord:
        quota = limits.max_concurrent_jobs is not None or limits.jobs_per_minute is not None
        async with self._transaction() as conn:
            if quota:
                # Before the duplicate check: a create that waited here sees the job the one
                # before it made, and reports the duplicate rather than a full quota.
                await conn.execute(
                    "SELECT pg_advisory_xact_lock(%s, hashtext(%s))", (JOB_QUOTA_LOCK, job.tenant)
                )
            if job.request_id:
                existing = await _job_by_request(conn, job)
                if existing is not None:
                    raise DuplicateRequest(existing)
            if quota:
                await _check_job_quotas(conn, job, limits)
            inserted = await conn.execute(
                f"INSERT INTO jobs ({JOB_COLUMNS}) VALUES ({', '.join(['%s'] * 14)}) "
                "ON CONFLICT (tenant, request_id) WHERE request_id <> '' DO NOTHING "
                "RETURNING job_id",
                (
                    job.job_id,
                    job.tenant,
                    job.request_id,
                    job.state,
                    job.spec,
                    job.query.encode(),
                    job.candidate_count,
                    job.create_time,
                    job.update_time,
                    first_event.sequence,
                    job.completion_reason,
                    job.error_code,
                    job.error_message.encode(),
                    job.trace_context,
                ),
            )
            await conn.execute(_INSERT_EVENTS, {"job": job.job_id, **_event_arrays([first_event])})
            if journal:
                await conn.execute(_INSERT_JOURNAL, {"job": job.job_id, **_journal_arrays(journal)})
            if await inserted.fetchone() is None:
                # A concurrent create with this request_id committed first; this statement's
                # fresh snapshot sees its job. Raising rolls back the event inserted above.
                existing = await _job_by_request(conn, job)
                assert existing is not None  # the unique index named it
                raise DuplicateRequest(existing)
        return dataclasses.replace(job, last_sequence=first_event.sequence)

    async def get_job(self, tenant: str, job_id: str) -> JobRecord | None:
        row = await self._fetchone(
            f"SELECT {JOB_COLUMNS} FROM jobs WHERE job_id = %s AND tenant = %s", (job_id, tenant)
        )
        return job_from_row(row) if row else None

    async def list_jobs(
        self, tenant: str, state: int | None, page_size: int, before_job_id: str | None
    ) -> list[JobRecord]:
        clauses: list[str] = ["tenant = %s"]
        params: list[object] = [tenant]
        if state is not None:
            clauses.append("state = %s")
            params.append(state)
        if before_job_id is not None:
            clauses.append("job_id < %s")
            params.append(before_job_id)
        rows = await self._fetchall(
            f"SELECT {JOB_COLUMNS} FROM jobs WHERE {' AND '.join(clauses)} "
            "ORDER BY job_id DESC LIMIT %s",
            (*params, page_size),
        )
        return [job_from_row(row) for row in rows]

    async def unfinished_jobs(self) -> list[JobRecord]:
        rows = await self._fetchall(
            f"SELECT {JOB_COLUMNS} FROM jobs WHERE {UNFINISHED_JOBS} ORDER BY job_id"
        )
        return [job_from_row(row) for row in rows]

    async def commit(self, job_id: str, update: JobUpdate, fence: Lease | None = None) -> None:
        last = update.events[-1] if update.events else None
        changes_job = last is not None or any(
            getattr(update, column) is not None
            for column in ("state", "completion_reason", "error_code", "error_message")
        )
        allowed, _ = await self._fetchone(
            _COMMIT,
            {
                "job": job_id,
                "epoch": None if fence is None else fence.epoch,
                "channel": self._channel,
                **_event_arrays(update.events),
                **_journal_arrays(update.journal),
                **cache_arrays(update.cache),
                **_settlement_arrays(update.settlements),
                "calls": [a.call_id for a in update.audit],
                "verdicts": [a.verdict for a in update.audit],
                "prompts": [a.prompt.encode() for a in update.audit],
                "answers": [a.raw_answer.encode() for a in update.audit],
                "changes_job": changes_job,
                "last_sequence": last.sequence if last else None,
                "update_time": last.time if last else None,
                "state": update.state,
                "completion_reason": update.completion_reason,
                "error_code": update.error_code,
                "error_message": (
                    None if update.error_message is None else update.error_message.encode()
                ),
            },
        )
        if not allowed:
            raise LeaseLost(f"job {job_id} is run by another replica now (lease epoch moved on)")

    async def read_events(
        self, tenant: str, job_id: str, after_sequence: int, limit: int, max_bytes: int
    ) -> list[EventRow]:
        # The page is cut where the running total of payload sizes passes max_bytes, in the
        # database: payloads past the cut are never sent.
        rows = await self._fetchall(
            "SELECT sequence, kind, time, payload FROM ("
            " SELECT sequence, kind, time, payload,"
            "  SUM(octet_length(payload)) OVER (ORDER BY sequence) AS running,"
            "  ROW_NUMBER() OVER (ORDER BY sequence) AS n"
            f" FROM events WHERE job_id = %(job)s AND sequence > %(after)s AND {_OWNED}"
            " ORDER BY sequence LIMIT %(limit)s"
            ") page WHERE n = 1 OR running <= %(max_bytes)s ORDER BY sequence",
            {
                "job": job_id,
                "tenant": tenant,
                "after": after_sequence,
                "limit": limit,
                "max_bytes": max_bytes,
            },
        )
        return [
            EventRow(sequence, kind, time, bytes(payload)) for sequence, kind, time, payload in rows
        ]

    async def latest_event(self, tenant: str, job_id: str, kinds: Sequence[str]) -> EventRow | None:
        row = await self._fetchone(
            "SELECT sequence, kind, time, payload FROM events "
            f"WHERE job_id = %(job)s AND kind = ANY(%(kinds)s) AND {_OWNED} "
            "ORDER BY sequence DESC LIMIT 1",
            {"job": job_id, "tenant": tenant, "kinds": list(kinds)},
        )
        return EventRow(row[0], row[1], row[2], bytes(row[3])) if row else None

    async def read_journal(self, job_id: str) -> list[JournalRow]:
        rows = await self._fetchall(
            "SELECT idx, kind, payload FROM journal WHERE job_id = %s ORDER BY idx", (job_id,)
        )
        return [JournalRow(index, kind, bytes(payload)) for index, kind, payload in rows]

    async def read_audit(self, tenant: str, job_id: str, call_id: str) -> VerdictAudit | None:
        row = await self._fetchone(
            "SELECT call_id, verdict, prompt, raw_answer FROM verdict_audit "
            f"WHERE job_id = %(job)s AND call_id = %(call)s AND {_OWNED}",
            {"job": job_id, "tenant": tenant, "call": call_id},
        )
        if row is None:
            return None
        call, verdict, prompt, raw_answer = row
        return VerdictAudit(call, bytes(verdict), text(prompt), text(raw_answer))

    async def read_verdicts(self, job_id: str, call_ids: Sequence[str]) -> dict[str, bytes]:
        if not call_ids:
            return {}
        rows = await self._fetchall(
            "SELECT call_id, verdict FROM verdict_audit WHERE job_id = %s AND call_id = ANY(%s)",
            (job_id, list(call_ids)),
        )
        return {call_id: bytes(verdict) for call_id, verdict in rows}


async def _job_by_request(conn: psycopg.AsyncConnection, job: JobRecord) -> JobRecord | None:
    cursor = await conn.execute(
        f"SELECT {JOB_COLUMNS} FROM jobs WHERE tenant = %s AND request_id = %s {BY_REQUEST_INDEX}",
        (job.tenant, job.request_id),
        binary=True,
    )
    row = await cursor.fetchone()
    return job_from_row(row) if row else None


async def _check_job_quotas(conn: psycopg.AsyncConnection, job: JobRecord, limits: Limits) -> None:
    window_start = job.create_time - RATE_WINDOW_S
    cursor = await conn.execute(
        f"SELECT (SELECT COUNT(*) FROM jobs WHERE tenant = %(tenant)s AND {UNFINISHED_JOBS}), "
        "(SELECT COUNT(*) FROM jobs WHERE tenant = %(tenant)s AND create_time > %(start)s)",
        {"tenant": job.tenant, "start": window_start},
    )
    counts = await cursor.fetchone()
    assert counts is not None  # a SELECT without FROM yields one row
    unfinished, recent = counts
    if limits.max_concurrent_jobs is not None and unfinished >= limits.max_concurrent_jobs:
        raise QuotaExceeded("max_concurrent_jobs", limits.max_concurrent_jobs)
    if limits.jobs_per_minute is not None and recent >= limits.jobs_per_minute:
        # One more fits once all but `jobs_per_minute - 1` of the window's jobs have left it:
        # usually that is the oldest, unless the limit was lowered meanwhile.
        cursor = await conn.execute(
            "SELECT create_time FROM jobs WHERE tenant = %s AND create_time > %s "
            "ORDER BY create_time LIMIT 1 OFFSET %s",
            (job.tenant, window_start, recent - limits.jobs_per_minute),
        )
        leaving = await cursor.fetchone()
        retry_after = (
            max(leaving[0] + RATE_WINDOW_S - job.create_time, MIN_RETRY_AFTER_S)
            if leaving
            else None  # a limit of zero: waiting never helps
        )
        raise QuotaExceeded("jobs_per_minute", limits.jobs_per_minute, retry_after)


def _event_arrays(events: Sequence[EventRow]) -> dict[str, list[Any]]:
    return {
        "sequences": [e.sequence for e in events],
        "kinds": [e.kind for e in events],
        "times": [e.time for e in events],
        "payloads": [e.payload for e in events],
    }


def _journal_arrays(rows: Sequence[JournalRow]) -> dict[str, list[Any]]:
    return {
        "indexes": [j.index for j in rows],
        "journal_kinds": [j.kind for j in rows],
        "journal_payloads": [j.payload for j in rows],
    }


def _settlement_arrays(settlements: Sequence[Settlement]) -> dict[str, list[Any]]:
    return {
        "settled_ids": [s.reservation_id for s in settlements],
        "settled_calls": [s.actual.calls for s in settlements],
        "settled_input": [s.actual.input_tokens for s in settlements],
        "settled_output": [s.actual.output_tokens for s in settlements],
        "settled_cost": [s.actual.cost_usd for s in settlements],
    }
