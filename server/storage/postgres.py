"""PostgreSQL storage, for several server replicas on one database.

Why psycopg 3 with psycopg_pool: the pool replaces broken connections in the background, so
the storage recovers without a restart when the database comes back; lists travel as arrays,
so a commit of any size is one statement (one round trip, a plan prepared once); pipeline mode
lets the statements of a transaction travel together; and it is built on libpq, so every
connection option and PG* environment variable operators know works in `--db`.

Semantics are SQLite's (server/storage/sqlite.py), with what several processes need on top:
- Idempotent creation rests on the unique index jobs_request: the insert that loses a race
  reads the winner's job and raises DuplicateRequest.
- Quotas are checked in the transaction that writes, after taking a per-tenant advisory lock:
  every replica creating a job (or reserving spend) for one tenant waits its turn, so none
  counts before another's write is visible, and limits hold in total, not per replica. Tenants
  without limits take no lock.
- Reads that must see one state (usage, a tenant with its provider keys) are single statements.
- Leases (owner, epoch, expiry by the database's clock) say which replica runs a job; claims
  skip rows other replicas are claiming (SKIP LOCKED), and a runner's commit locks its job's
  row and checks the epoch in the same statement, so a replica that lost its lease writes
  nothing. Watch slots are rows, counted under a per-tenant advisory lock like the quotas.
- Commits with events, cancel requests and handed-back leases NOTIFY the schema's channel; each
  replica LISTENs on one connection outside the pool (a session of its own: LISTEN does not
  survive transaction pooling, e.g. PgBouncer's transaction mode).

Connections are in autocommit; a write opens its transaction explicitly. Every driver error
leaves this module as a StorageError in plain words, never a driver's class name.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import AsyncIterator, Sequence
from typing import Any

import anyio
import psycopg
import structlog
from psycopg import sql
from psycopg_pool import AsyncConnectionPool

from tierank.server.errors import (
    LeaseLost,
    QuotaExceeded,
    StorageDamaged,
    StorageError,
    StorageFull,
    StorageUnavailable,
)
from tierank.server.storage.base import (
    CANCEL,
    DEFAULT_LIMITS,
    EVENTS,
    FREED,
    LIMIT_NAMES,
    RESYNC,
    CacheEntry,
    Change,
    Claim,
    DuplicateRequest,
    EventRow,
    JobRecord,
    JobUpdate,
    JournalRow,
    KeyRecord,
    Lease,
    Limits,
    Membership,
    OperationRecord,
    QualificationRecord,
    Reservation,
    Settlement,
    Spend,
    Storage,
    TenantRecord,
    UsageReport,
    VerdictAudit,
)
from tierank.server.storage.pg_migrations import (
    UNFINISHED_JOBS,
    apply_migrations,
    migration_states,
)

# The quota rules themselves are SQLite's, shared so the two backends cannot drift apart.
from tierank.server.storage.rules import (
    MIN_RETRY_AFTER_S,
    RATE_WINDOW_S,
    check_daily_limits,
    operation_from_row,
    plus,
    spend_from_row,
    tenant_from_row,
)

_NO_LIMITS = Limits()
# Advisory locks of the (int, int) form: a class per kind of quota, the tenant's hash second.
# One tenant's job creations and spend reservations then never wait on each other.
_JOB_QUOTA_LOCK = 0x74720001
_SPEND_LOCK = 0x74720002
_WATCH_LOCK = 0x74720003
# How long a caller waits for a pooled connection when statements have no timeout.
_DEFAULT_CONNECTION_WAIT_S = 30.0
# Driver messages can quote a damaged row's bytes; a client is told the gist only.
_MAX_DETAIL = 200
_DAMAGED_STATES = frozenset({"XX001", "XX002"})  # data_corrupted, index_corrupted
# The server is shutting down, restarting, or not accepting connections yet.
_GONE_STATES = frozenset({"57P01", "57P02", "57P03"})


def _plain(error: psycopg.Error) -> StorageError:
    """A driver error as a StorageError in plain words."""
    diag_message = error.diag.message_primary if error.diag is not None else None
    # libpq spreads a connection failure over several indented lines; one line reads better.
    detail = " ".join((diag_message or str(error) or "no reason given").split())[:_MAX_DETAIL]
    state = error.sqlstate or ""
    if state == "53100":  # disk_full
        return StorageFull(f"the disk holding the database is full ({detail})")
    if state in _DAMAGED_STATES:
        return StorageDamaged(f"the database is damaged: {detail}")
    if state == "57014":  # query_canceled: the statement timeout, or an operator's cancel
        return StorageError(f"the database gave up on a statement: {detail}")
    # Without a SQLSTATE an operational error comes from the connection itself (refused, reset,
    # timed out), as does an interface error on a connection that was closed under it.
    unreachable = (
        state.startswith("08")
        or state in _GONE_STATES
        or (not state and isinstance(error, psycopg.OperationalError | psycopg.InterfaceError))
    )
    if unreachable:
        return StorageUnavailable(f"the database is unreachable: {detail}")
    return StorageError(f"the database failed: {detail}")


def _operation(row: Sequence[Any]) -> OperationRecord:
    return operation_from_row(row, _text(row[12]))


def _text(stored: bytes) -> str:
    """Free text kept as UTF-8 bytes (see pg_migrations: TEXT cannot hold NUL)."""
    try:
        return bytes(stored).decode()
    except UnicodeDecodeError as error:
        raise StorageDamaged(
            f"the database is damaged: stored text is not UTF-8 ({error})"
        ) from None


def _dropped(conn: psycopg.AsyncConnection) -> bool:
    """Whether the server closed this idle connection, as far as can be told without a round
    trip: the first read takes in what it sent meanwhile (a "terminating connection" notice),
    the second meets the end of the stream if it closed the connection after it."""
    try:
        conn.pgconn.consume_input()
        conn.pgconn.consume_input()
    except psycopg.OperationalError:
        return True
    return False


_JOB_COLUMNS = (
    "job_id, tenant, request_id, state, spec, query, candidate_count, create_time, "
    "update_time, last_sequence, completion_reason, error_code, error_message, trace_context"
)
_TENANT_COLUMNS = (
    f"tenant, {', '.join(LIMIT_NAMES)}, allow_server_provider_keys, create_time, update_time"
)
_QUALIFICATION_COLUMNS = (
    "qualification_id, tenant, judge_identity, create_time, usable, weight, payload"
)
_OPERATION_COLUMNS = (
    "operation_id, tenant, request_id, request_digest, method, state, owner, create_time, "
    "update_time, progress, result, error_code, error_message, cancel_requested"
)
# Operations take their states from jobs' (JobState), so "unfinished" is the same predicate.
_UNFINISHED_OPERATION = UNFINISHED_JOBS


_KEY_COLUMNS = (
    "key_id, tenant, role, display_name, secret_hash, create_time, revoke_time, certificate_subject"
)
# The tenant's provider names ride along in the same statement: one snapshot, one round trip.
_TENANT_SELECT = (
    f"SELECT {_TENANT_COLUMNS}, ARRAY(SELECT provider FROM provider_keys p "
    "WHERE p.tenant = tenants.tenant ORDER BY provider) FROM tenants"
)


def _sums(table: str) -> str:
    """calls, input_tokens, output_tokens, cost_usd of a tenant's day in `table`."""
    return (
        "SELECT COALESCE(SUM(calls), 0)::bigint, COALESCE(SUM(input_tokens), 0)::bigint, "
        "COALESCE(SUM(output_tokens), 0)::bigint, COALESCE(SUM(cost_usd), 0)::float8 "
        f"FROM {table} WHERE tenant = %(tenant)s AND day = %(day)s"
    )


_DAILY_LIMITED = (
    "(daily_judge_calls IS NOT NULL OR daily_input_tokens IS NOT NULL "
    "OR daily_cost_usd IS NOT NULL)"
)
_HOLD = (
    "INSERT INTO reservations (reservation_id, tenant, day, judge, calls, input_tokens, "
    "output_tokens, cost_usd, owner)"
)
_HELD_VALUES = (
    "%(id)s, %(tenant)s, %(day)s, %(judge)s, %(calls)s, %(input_tokens)s, %(output_tokens)s, "
    "%(cost_usd)s, %(owner)s"
)

# Another tenant's job must look like no job at all: rows of a job are read only while the job
# belongs to the caller's tenant.
_OWNED = "EXISTS (SELECT 1 FROM jobs WHERE jobs.job_id = %(job)s AND jobs.tenant = %(tenant)s)"

_ADD_USAGE = (
    "ON CONFLICT (tenant, day, judge) DO UPDATE SET calls = usage.calls + excluded.calls, "
    "input_tokens = usage.input_tokens + excluded.input_tokens, "
    "output_tokens = usage.output_tokens + excluded.output_tokens, "
    "cost_usd = usage.cost_usd + excluded.cost_usd"
)


# Rows go in as one array per column: a statement's text does not depend on how many rows it
# carries, so the server prepares it once and reuses the plan.
_INSERT_EVENTS = (
    "INSERT INTO events (job_id, sequence, kind, time, payload) SELECT %(job)s, * FROM "
    "unnest(%(sequences)s::bigint[], %(kinds)s::text[], %(times)s::float8[], "
    "%(payloads)s::bytea[]) AS new_event"
)
_CACHE_SELECT = (
    "INSERT INTO verdict_cache (key, payload) "
    "SELECT * FROM unnest(%(keys)s::text[], %(cache_payloads)s::bytea[])"
)
_CACHE_CONFLICT = "ON CONFLICT (key) DO UPDATE SET payload = excluded.payload"
_CACHE_UPSERT = f"{_CACHE_SELECT} {_CACHE_CONFLICT}"
# A commit is one statement: all of it or nothing, in one round trip. Every data-modifying
# part of a WITH runs, referenced or not; a job column whose value is NULL keeps its value.
# The database's clock, in seconds: every replica measures leases by the same clock.
_NOW = "extract(epoch FROM clock_timestamp())::float8"
# A fenced commit first locks the job's row if its lease epoch is still the one given (a claim
# by another replica waits for this commit, or this commit sees the claim and writes nothing);
# an unfenced one (epoch NULL) writes unconditionally.
_ALLOWED = "(%(epoch)s::bigint IS NULL OR EXISTS (SELECT 1 FROM fence))"
_COMMIT = f"""
WITH fence AS MATERIALIZED (
    SELECT job_id FROM jobs WHERE job_id = %(job)s AND lease_epoch = %(epoch)s::bigint FOR UPDATE
),
new_events AS ({_INSERT_EVENTS} WHERE {_ALLOWED}),
new_journal AS (
    INSERT INTO journal (job_id, idx, kind, payload) SELECT %(job)s, * FROM
    unnest(%(indexes)s::bigint[], %(journal_kinds)s::text[], %(journal_payloads)s::bytea[])
    WHERE {_ALLOWED}
),
new_cache AS ({_CACHE_SELECT} WHERE {_ALLOWED} {_CACHE_CONFLICT}),
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
    FROM released JOIN settled USING (reservation_id) GROUP BY tenant, day, judge {_ADD_USAGE}
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


_CLAIMED_COLUMNS = ", ".join(
    f"jobs.{column}" for column in (*_JOB_COLUMNS.split(", "), "lease_epoch", "cancel_requested")
)
# `{which}` narrows the claim to one job. SKIP LOCKED: replicas claiming at once each take
# other jobs rather than queueing behind one another's locks.
_CLAIM = f"""
WITH claimable AS (
    SELECT job_id FROM jobs WHERE {UNFINISHED_JOBS} {{which}}
    AND (lease_owner IS NULL OR lease_until < {_NOW})
    ORDER BY job_id LIMIT %(limit)s FOR UPDATE SKIP LOCKED
)
UPDATE jobs SET lease_owner = %(owner)s, lease_epoch = jobs.lease_epoch + 1,
    lease_until = {_NOW} + %(lease)s
FROM claimable WHERE jobs.job_id = claimable.job_id
RETURNING {_CLAIMED_COLUMNS}
"""
_LIVE = f"alive_until >= {_NOW}"
# A replica's heartbeat also clears up after replicas that stopped beating: their rows, their
# watch slots, and their open reservations, settled at the reserved (worst-case) spend, since
# their calls may have been paid for. One statement: one round trip a second per replica.
_HEARTBEAT = f"""
WITH me AS (
    INSERT INTO replicas (replica_id, alive_until, draining)
    VALUES (%(replica)s, {_NOW} + %(ttl)s, %(draining)s)
    ON CONFLICT (replica_id) DO UPDATE
    SET alive_until = excluded.alive_until, draining = excluded.draining
),
gone AS (DELETE FROM replicas WHERE NOT ({_LIVE}) AND replica_id <> %(replica)s),
unwatched AS (
    DELETE FROM watchers w WHERE w.replica_id <> %(replica)s AND NOT EXISTS
    (SELECT 1 FROM replicas r WHERE r.replica_id = w.replica_id AND r.{_LIVE})
),
released AS (
    DELETE FROM reservations held WHERE held.owner <> %(replica)s AND NOT EXISTS
    (SELECT 1 FROM replicas r WHERE r.replica_id = held.owner AND r.{_LIVE})
    RETURNING tenant, day, judge, calls, input_tokens, output_tokens, cost_usd
),
settled AS (
    INSERT INTO usage (tenant, day, judge, calls, input_tokens, output_tokens, cost_usd)
    SELECT tenant, day, judge, SUM(calls), SUM(input_tokens), SUM(output_tokens), SUM(cost_usd)
    FROM released GROUP BY tenant, day, judge {_ADD_USAGE}
)
SELECT (NOT %(draining)s)::int + (SELECT COUNT(*) FROM replicas
        WHERE {_LIVE} AND NOT draining AND replica_id <> %(replica)s),
    (SELECT COUNT(*) FROM jobs WHERE {UNFINISHED_JOBS})
"""
# After a lost connection, listening again waits this long between attempts.
_RELISTEN_S = 1.0


def _claim(owner: str, row: Sequence[Any]) -> Claim:
    job = _job_from_row(row[:-2])
    return Claim(job, Lease(job.job_id, owner, row[-2]), cancel_requested=row[-1])


def _change(payload: str) -> Change | None:
    """A notification's payload, `KIND JOB_ID [SEQUENCE]`; None for one this version does not
    know (a newer replica's)."""
    kind, _, rest = payload.partition(" ")
    job_id, _, sequence = rest.partition(" ")
    if kind not in (EVENTS, CANCEL, FREED) or not job_id:
        return None
    return Change(kind, job_id, int(sequence) if sequence.isdigit() else 0)


def _job_from_row(row: Sequence[Any]) -> JobRecord:
    (job_id, tenant, request_id, state, spec, query, count, created, updated, *rest) = row
    last_sequence, completion_reason, error_code, error_message, trace_context = rest
    return JobRecord(
        job_id=job_id,
        tenant=tenant,
        request_id=request_id,
        state=state,
        spec=bytes(spec),
        query=_text(query),
        candidate_count=count,
        create_time=created,
        update_time=updated,
        last_sequence=last_sequence,
        completion_reason=completion_reason,
        error_code=error_code,
        error_message=_text(error_message),
        trace_context=trace_context,
    )


def _tenant(row: Sequence[Any]) -> TenantRecord:
    return tenant_from_row(row[:-1], row[-1])


def _key(row: Sequence[Any]) -> KeyRecord:
    key_id, tenant, role, display_name, secret_hash, *rest = row
    return KeyRecord(key_id, tenant, role, display_name, bytes(secret_hash), *rest)


async def _configure(
    conn: psycopg.AsyncConnection, schema: str | None, statement_timeout_s: float
) -> None:
    timeout_ms = str(round(statement_timeout_s * 1000))
    if schema is None:
        await conn.execute("SELECT set_config('statement_timeout', %s, false)", (timeout_ms,))
        return
    await conn.execute(
        "SELECT set_config('statement_timeout', %s, false), set_config('search_path', %s, false)",
        (timeout_ms, sql.Identifier(schema).as_string(conn)),
    )


# Connections run in autocommit (a write opens its own transaction); the name shows in
# pg_stat_activity unless the URL names the application itself.
_CONNECTION_OPTIONS: dict[str, Any] = {"autocommit": True, "fallback_application_name": "tierank"}


@contextlib.asynccontextmanager
async def _session(url: str, schema: str | None) -> AsyncIterator[psycopg.AsyncConnection]:
    """One connection outside any pool, without a statement timeout (see pg_migrations)."""
    try:
        conn = await psycopg.AsyncConnection.connect(url, **_CONNECTION_OPTIONS)
    except psycopg.Error as error:
        raise _plain(error) from error
    try:
        await _configure(conn, schema, 0)
        yield conn
    except psycopg.Error as error:
        raise _plain(error) from error
    finally:
        await conn.close()


async def migrate(url: str, schema: str | None = None) -> list[int]:
    """Apply pending schema migrations (servers do it at start-up too); the versions applied."""
    async with _session(url, schema) as conn:
        return await apply_migrations(conn, schema)


async def migration_status(url: str, schema: str | None = None) -> list[tuple[int, str, bool]]:
    """(version, description, applied) of every migration, oldest first."""
    async with _session(url, schema) as conn:
        return await migration_states(conn)


class PostgresStorage(Storage):
    """Open one with `PostgresStorage.connect`."""

    shared = True

    def __init__(self, pool: AsyncConnectionPool, url: str, channel: str) -> None:
        self._pool = pool
        self._url = url
        # Notifications reach every session of the database: the channel is the schema's, so
        # that servers on other schemas of one database never wake each other.
        self._channel = channel

    @classmethod
    async def connect(
        cls,
        url: str,
        *,
        pool_size: int,
        statement_timeout_s: float,
        schema: str | None = None,
    ) -> PostgresStorage:
        """Apply pending migrations, then open a pool of `pool_size` connections whose
        statements are cancelled after `statement_timeout_s` (0: never). `schema` (created if
        missing) holds the tables instead of the search_path's first schema. Raises
        StorageError when the database is unreachable or a migration fails."""
        # Migrations run first on a connection of their own: a refused connection or a failed
        # migration is then reported as it is, rather than as a pool that never fills.
        await migrate(url, schema)

        async def configure(conn: psycopg.AsyncConnection) -> None:
            await _configure(conn, schema, statement_timeout_s)

        wait_s = statement_timeout_s or _DEFAULT_CONNECTION_WAIT_S
        pool: AsyncConnectionPool = AsyncConnectionPool(
            url,
            min_size=pool_size,
            max_size=pool_size,
            kwargs=_CONNECTION_OPTIONS,
            configure=configure,
            open=False,
            timeout=wait_s,
            name="tierank",
        )
        try:
            await pool.open(wait=True, timeout=wait_s)
            async with pool.connection() as conn:
                cursor = await conn.execute("SELECT current_schema()")
                (current,) = await cursor.fetchone()  # type: ignore[misc]
        except psycopg.Error as error:
            await pool.close()
            raise _plain(error) from error
        return cls(pool, url, f"tierank:{current}")

    @contextlib.asynccontextmanager
    async def _connection(self) -> AsyncIterator[psycopg.AsyncConnection]:
        # A restart of the database closes every pooled connection at once, and each would
        # fail the first statement sent on it: those are replaced here, before any is used.
        for _ in range(self._pool.max_size):
            conn = await self._pool.getconn()
            if not _dropped(conn):
                break
            await self._pool.putconn(conn)
        else:
            conn = await self._pool.getconn()
        try:
            yield conn
        finally:
            await self._pool.putconn(conn)

    @contextlib.asynccontextmanager
    async def _transaction(self) -> AsyncIterator[psycopg.AsyncConnection]:
        """A connection in one transaction, in pipeline mode: statements whose results are not
        awaited at once travel together with the next ones, BEGIN and COMMIT included."""
        try:
            async with self._connection() as conn, conn.pipeline(), conn.transaction():
                yield conn
        except psycopg.Error as error:
            raise _plain(error) from error

    async def _fetchone(self, query: Any, params: Any) -> Any:
        try:
            async with self._connection() as conn:
                cursor = await conn.execute(query, params, binary=True)
                return await cursor.fetchone()
        except psycopg.Error as error:
            raise _plain(error) from error

    async def _execute(self, query: Any, params: Any) -> None:
        """One statement, hence one transaction and one round trip."""
        try:
            async with self._connection() as conn:
                await conn.execute(query, params)
        except psycopg.Error as error:
            raise _plain(error) from error

    async def _fetchall(self, query: Any, params: Any = None) -> list[Any]:
        try:
            async with self._connection() as conn:
                cursor = await conn.execute(query, params, binary=True)
                return await cursor.fetchall()
        except psycopg.Error as error:
            raise _plain(error) from error

    # -- jobs ---------------------------------------------------------------------------------

    async def create_job(
        self, job: JobRecord, first_event: EventRow, limits: Limits = _NO_LIMITS
    ) -> JobRecord:
        quota = limits.max_concurrent_jobs is not None or limits.jobs_per_minute is not None
        async with self._transaction() as conn:
            if quota:
                # Before the duplicate check: a create that waited here sees the job the one
                # before it made, and reports the duplicate rather than a full quota.
                await conn.execute(
                    "SELECT pg_advisory_xact_lock(%s, hashtext(%s))", (_JOB_QUOTA_LOCK, job.tenant)
                )
            if job.request_id:
                existing = await _job_by_request(conn, job)
                if existing is not None:
                    raise DuplicateRequest(existing)
            if quota:
                await _check_job_quotas(conn, job, limits)
            inserted = await conn.execute(
                f"INSERT INTO jobs ({_JOB_COLUMNS}) VALUES ({', '.join(['%s'] * 14)}) "
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
            if await inserted.fetchone() is None:
                # A concurrent create with this request_id committed first; this statement's
                # fresh snapshot sees its job. Raising rolls back the event inserted above.
                existing = await _job_by_request(conn, job)
                assert existing is not None  # the unique index named it
                raise DuplicateRequest(existing)
        return dataclasses.replace(job, last_sequence=first_event.sequence)

    async def get_job(self, tenant: str, job_id: str) -> JobRecord | None:
        row = await self._fetchone(
            f"SELECT {_JOB_COLUMNS} FROM jobs WHERE job_id = %s AND tenant = %s", (job_id, tenant)
        )
        return _job_from_row(row) if row else None

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
            f"SELECT {_JOB_COLUMNS} FROM jobs WHERE {' AND '.join(clauses)} "
            "ORDER BY job_id DESC LIMIT %s",
            (*params, page_size),
        )
        return [_job_from_row(row) for row in rows]

    async def unfinished_jobs(self) -> list[JobRecord]:
        rows = await self._fetchall(
            f"SELECT {_JOB_COLUMNS} FROM jobs WHERE {UNFINISHED_JOBS} ORDER BY job_id"
        )
        return [_job_from_row(row) for row in rows]

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
                "indexes": [j.index for j in update.journal],
                "journal_kinds": [j.kind for j in update.journal],
                "journal_payloads": [j.payload for j in update.journal],
                **_cache_arrays(update.cache),
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

    # -- leases ---------------------------------------------------------------------------

    async def heartbeat(self, replica: str, ttl_s: float, draining: bool = False) -> Membership:
        row = await self._fetchone(
            _HEARTBEAT, {"replica": replica, "ttl": ttl_s, "draining": draining}
        )
        return Membership(live_replicas=row[0], unfinished_jobs=row[1])

    async def leave(self, replica: str) -> None:
        await self._execute(
            "WITH gone AS (DELETE FROM replicas WHERE replica_id = %(replica)s), "
            "unwatched AS (DELETE FROM watchers WHERE replica_id = %(replica)s) SELECT 1",
            {"replica": replica},
        )

    async def claim_jobs(self, owner: str, lease_s: float, limit: int) -> list[Claim]:
        if limit <= 0:
            return []
        rows = await self._fetchall(
            _CLAIM.format(which=""), {"owner": owner, "lease": lease_s, "limit": limit}
        )
        return [_claim(owner, row) for row in rows]

    async def claim_job(self, job_id: str, owner: str, lease_s: float) -> Claim | None:
        row = await self._fetchone(
            _CLAIM.format(which="AND job_id = %(job)s"),
            {"owner": owner, "lease": lease_s, "limit": 1, "job": job_id},
        )
        return _claim(owner, row) if row else None

    async def renew_leases(self, leases: Sequence[Lease], lease_s: float) -> dict[str, bool]:
        if not leases:
            return {}
        rows = await self._fetchall(
            f"UPDATE jobs SET lease_until = {_NOW} + %(lease)s "
            "FROM unnest(%(jobs)s::text[], %(epochs)s::bigint[]) AS held(job_id, epoch) "
            "WHERE jobs.job_id = held.job_id AND jobs.lease_epoch = held.epoch "
            "AND jobs.lease_owner = %(owner)s RETURNING jobs.job_id, jobs.cancel_requested",
            {
                "lease": lease_s,
                "owner": leases[0].owner,
                "jobs": [lease.job_id for lease in leases],
                "epochs": [lease.epoch for lease in leases],
            },
        )
        return dict(rows)

    async def release_lease(self, lease: Lease) -> None:
        await self._execute(
            "WITH freed AS (UPDATE jobs SET lease_owner = NULL, lease_until = 0 "
            "WHERE job_id = %(job)s AND lease_epoch = %(epoch)s "
            f"AND {UNFINISHED_JOBS} RETURNING job_id) "
            "SELECT pg_notify(%(channel)s, 'freed ' || job_id) FROM freed",
            {"job": lease.job_id, "epoch": lease.epoch, "channel": self._channel},
        )

    async def request_cancel(self, tenant: str, job_id: str) -> bool:
        row = await self._fetchone(
            "WITH marked AS (UPDATE jobs SET cancel_requested = TRUE "
            f"WHERE job_id = %(job)s AND tenant = %(tenant)s AND {UNFINISHED_JOBS} "
            "RETURNING job_id) "
            "SELECT COUNT(pg_notify(%(channel)s, 'cancel ' || job_id)) FROM marked",
            {"job": job_id, "tenant": tenant, "channel": self._channel},
        )
        return bool(row[0])

    async def hold_watcher(self, watch_id: str, replica: str, tenant: str, limit: int) -> None:
        values = {
            "watch": watch_id,
            "replica": replica,
            "tenant": tenant,
            "limit": limit,
            "lock": _WATCH_LOCK,
        }
        async with self._transaction() as conn:
            # The lock in a statement of its own, as in reserve_spend: the count's snapshot is
            # taken after it, so it sees every stream held by whoever held the lock before.
            await conn.execute(
                "SELECT pg_advisory_xact_lock(%(lock)s, hashtext(%(tenant)s))", values
            )
            held = await conn.execute(
                "INSERT INTO watchers (watch_id, replica_id, tenant) "
                "SELECT %(watch)s, %(replica)s, %(tenant)s WHERE (SELECT COUNT(*) FROM watchers w "
                "JOIN replicas r USING (replica_id) "
                f"WHERE w.tenant = %(tenant)s AND r.{_LIVE}) < %(limit)s RETURNING 1",
                values,
            )
            if await held.fetchone() is None:
                raise QuotaExceeded("max_watchers", limit)

    async def release_watcher(self, watch_id: str) -> None:
        await self._execute("DELETE FROM watchers WHERE watch_id = %s", (watch_id,))

    async def put_qualification(self, record: QualificationRecord) -> None:
        await self._execute(
            f"INSERT INTO qualifications ({_QUALIFICATION_COLUMNS}) "
            "VALUES (%s, %s, %s, %s, %s, %s, %s)",
            dataclasses.astuple(record),
        )

    async def list_qualifications(
        self, tenant: str, judge_identity: str | None, limit: int
    ) -> list[QualificationRecord]:
        rows = await self._fetchall(
            f"SELECT {_QUALIFICATION_COLUMNS} FROM qualifications WHERE tenant = %(tenant)s "
            "AND (%(judge)s::text IS NULL OR judge_identity = %(judge)s) "
            "ORDER BY create_time DESC, qualification_id DESC LIMIT %(limit)s",
            {"tenant": tenant, "judge": judge_identity, "limit": limit},
        )
        return [_qualification(row) for row in rows]

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
            f"SELECT {_OPERATION_COLUMNS} FROM operations WHERE tenant = %s AND request_id = %s",
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
            f"UPDATE operations SET progress = %s, update_time = {_NOW} "
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
            f"error_message = %s, update_time = {_NOW} "
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
            f"error_message = %(message)s, update_time = {_NOW} "
            f"WHERE {_UNFINISHED_OPERATION} AND owner <> %(replica)s AND NOT EXISTS "
            f"(SELECT 1 FROM replicas r WHERE r.replica_id = o.owner AND r.{_LIVE}) "
            "RETURNING 1) SELECT COUNT(*) FROM ended",
            {
                "state": state,
                "code": error_code,
                "message": error_message.encode(),
                "replica": replica,
            },
        )
        return int(row[0])

    async def delete_qualification(
        self, tenant: str, qualification_id: str
    ) -> QualificationRecord | None:
        row = await self._fetchone(
            "DELETE FROM qualifications WHERE tenant = %s AND qualification_id = %s "
            f"RETURNING {_QUALIFICATION_COLUMNS}",
            (tenant, qualification_id),
        )
        return None if row is None else _qualification(row)

    def announce(self, address: str) -> None:
        """Nothing to say: every replica is welcome on a shared database, none is refused."""

    async def ping(self) -> None:
        await self._fetchone("SELECT 1", None)

    async def changes(self) -> AsyncIterator[Change]:
        """Notifications on a connection of its own (LISTEN needs a session: see the module
        docstring), reconnecting with a pause while the database is away."""
        log = structlog.get_logger()
        while True:
            try:
                conn = await psycopg.AsyncConnection.connect(self._url, **_CONNECTION_OPTIONS)
            except psycopg.Error as error:
                log.warning("cannot listen for other replicas' changes", error=str(_plain(error)))
                await anyio.sleep(_RELISTEN_S)
                continue
            try:
                await conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(self._channel)))
                yield Change(RESYNC, "")
                async for notice in conn.notifies():
                    change = _change(notice.payload)
                    if change is not None:
                        yield change
            except psycopg.Error as error:
                log.warning("stopped listening for changes", error=str(_plain(error)))
                await anyio.sleep(_RELISTEN_S)
            finally:
                with anyio.CancelScope(shield=True):
                    await conn.close()

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

    async def cache_get(self, key: str) -> bytes | None:
        row = await self._fetchone("SELECT payload FROM verdict_cache WHERE key = %s", (key,))
        return bytes(row[0]) if row else None

    async def cache_put(self, entries: Sequence[CacheEntry]) -> None:
        if entries:
            await self._execute(_CACHE_UPSERT, _cache_arrays(entries))

    async def read_audit(self, tenant: str, job_id: str, call_id: str) -> VerdictAudit | None:
        row = await self._fetchone(
            "SELECT call_id, verdict, prompt, raw_answer FROM verdict_audit "
            f"WHERE job_id = %(job)s AND call_id = %(call)s AND {_OWNED}",
            {"job": job_id, "tenant": tenant, "call": call_id},
        )
        if row is None:
            return None
        call, verdict, prompt, raw_answer = row
        return VerdictAudit(call, bytes(verdict), _text(prompt), _text(raw_answer))

    async def read_verdicts(self, job_id: str, call_ids: Sequence[str]) -> dict[str, bytes]:
        if not call_ids:
            return {}
        rows = await self._fetchall(
            "SELECT call_id, verdict FROM verdict_audit WHERE job_id = %s AND call_id = ANY(%s)",
            (job_id, list(call_ids)),
        )
        return {call_id: bytes(verdict) for call_id, verdict in rows}

    # -- tenants, keys, spend ---------------------------------------------------------------

    async def put_tenant(
        self,
        tenant: str,
        set_limits: Limits,
        clear_limits: Sequence[str],
        allow_server_provider_keys: bool | None,
        now: float,
    ) -> TenantRecord:
        # Limit names become column names below: only the known ones may get that far.
        unknown = sorted(set(clear_limits) - set(LIMIT_NAMES))
        if unknown:
            raise ValueError(f"unknown limits: {', '.join(unknown)}")
        changes: dict[str, Any] = dict(set_limits.given())
        changes.update(dict.fromkeys(clear_limits))
        if allow_server_provider_keys is not None:
            changes["allow_server_provider_keys"] = allow_server_provider_keys
        changes["update_time"] = now
        assignments = sql.SQL(", ").join(
            sql.SQL("{} = %s").format(sql.Identifier(column)) for column in changes
        )
        async with self._transaction() as conn:
            await _ensure_tenant(conn, tenant, now)
            await conn.execute(
                sql.SQL("UPDATE tenants SET {} WHERE tenant = %s").format(assignments),
                (*changes.values(), tenant),
            )
            cursor = await conn.execute(f"{_TENANT_SELECT} WHERE tenant = %s", (tenant,))
            row = await cursor.fetchone()
        assert row is not None  # ensured above, in this transaction
        return _tenant(row)

    async def get_tenant(self, tenant: str) -> TenantRecord | None:
        row = await self._fetchone(f"{_TENANT_SELECT} WHERE tenant = %s", (tenant,))
        return _tenant(row) if row else None

    async def list_tenants(self) -> list[TenantRecord]:
        return [_tenant(row) for row in await self._fetchall(f"{_TENANT_SELECT} ORDER BY tenant")]

    async def create_key(self, key: KeyRecord) -> None:
        async with self._transaction() as conn:
            await _ensure_tenant(conn, key.tenant, key.create_time)
            await conn.execute(
                f"INSERT INTO api_keys ({_KEY_COLUMNS}) VALUES ({', '.join(['%s'] * 8)})",
                dataclasses.astuple(key),
            )

    async def get_key(self, key_id: str) -> KeyRecord | None:
        row = await self._fetchone(
            f"SELECT {_KEY_COLUMNS} FROM api_keys WHERE key_id = %s", (key_id,)
        )
        return _key(row) if row else None

    async def key_for_subject(self, certificate_subject: str) -> KeyRecord | None:
        if not certificate_subject:
            return None
        # Should two live keys name one subject, the newest wins: mapping a certificate to a
        # new key takes effect at once. The `<> ''` term lets the planner use the partial
        # index api_keys_subject.
        row = await self._fetchone(
            f"SELECT {_KEY_COLUMNS} FROM api_keys "
            "WHERE certificate_subject = %s AND certificate_subject <> '' "
            "AND revoke_time IS NULL ORDER BY create_time DESC, key_id DESC LIMIT 1",
            (certificate_subject,),
        )
        return _key(row) if row else None

    async def list_keys(self, tenant: str | None, include_revoked: bool) -> list[KeyRecord]:
        clauses, params = ["TRUE"], []
        if tenant is not None:
            clauses.append("tenant = %s")
            params.append(tenant)
        if not include_revoked:
            clauses.append("revoke_time IS NULL")
        rows = await self._fetchall(
            f"SELECT {_KEY_COLUMNS} FROM api_keys WHERE {' AND '.join(clauses)} "
            "ORDER BY create_time, key_id",
            params,
        )
        return [_key(row) for row in rows]

    async def revoke_key(self, key_id: str, now: float) -> KeyRecord | None:
        row = await self._fetchone(
            "UPDATE api_keys SET revoke_time = COALESCE(revoke_time, %s) WHERE key_id = %s "
            f"RETURNING {_KEY_COLUMNS}",
            (now, key_id),
        )
        return _key(row) if row else None

    async def set_provider_key(
        self, tenant: str, provider: str, sealed: bytes | None
    ) -> TenantRecord | None:
        async with self._transaction() as conn:
            # The tenant row is locked so that it cannot be deleted or race this change.
            cursor = await conn.execute(
                "SELECT 1 FROM tenants WHERE tenant = %s FOR UPDATE", (tenant,)
            )
            if await cursor.fetchone() is None:
                return None
            if sealed is None:
                await conn.execute(
                    "DELETE FROM provider_keys WHERE tenant = %s AND provider = %s",
                    (tenant, provider),
                )
            else:
                await conn.execute(
                    "INSERT INTO provider_keys (tenant, provider, sealed) VALUES (%s, %s, %s) "
                    "ON CONFLICT (tenant, provider) DO UPDATE SET sealed = excluded.sealed",
                    (tenant, provider, sealed),
                )
            cursor = await conn.execute(f"{_TENANT_SELECT} WHERE tenant = %s", (tenant,))
            row = await cursor.fetchone()
        return _tenant(row) if row else None

    async def provider_key(self, tenant: str, provider: str) -> bytes | None:
        row = await self._fetchone(
            "SELECT sealed FROM provider_keys WHERE tenant = %s AND provider = %s",
            (tenant, provider),
        )
        return bytes(row[0]) if row else None

    async def reserve_spend(self, reservation: Reservation) -> None:
        r = reservation
        values = {
            "id": r.reservation_id,
            "tenant": r.tenant,
            "day": r.day,
            "judge": r.judge,
            "owner": r.owner,
            **dataclasses.asdict(r.spend),
            "lock": _SPEND_LOCK,
        }
        # Most tenants have no daily limit: one statement holds their spend, and takes no lock.
        held = await self._fetchone(
            f"{_HOLD} SELECT {_HELD_VALUES} WHERE NOT EXISTS (SELECT 1 FROM tenants "
            f"WHERE tenant = %(tenant)s AND {_DAILY_LIMITED}) RETURNING 1",
            values,
        )
        if held is not None:
            return
        async with self._transaction() as conn:
            # The lock in a statement of its own: the next one's snapshot, taken after it, sees
            # every reservation committed by whoever held the lock before.
            await conn.execute(
                "SELECT pg_advisory_xact_lock(%(lock)s, hashtext(%(tenant)s))", values
            )
            cursor = await conn.execute(
                "SELECT daily_judge_calls, daily_input_tokens, daily_cost_usd, settled.*, held.* "
                f"FROM tenants, ({_sums('usage')}) settled, ({_sums('reservations')}) held "
                "WHERE tenant = %(tenant)s",
                values,
            )
            row = await cursor.fetchone()
            if row is not None:
                spent = plus(plus(spend_from_row(row[3:7]), spend_from_row(row[7:11])), r.spend)
                check_daily_limits(row[:3], spent)
            await conn.execute(f"{_HOLD} VALUES ({_HELD_VALUES})", values)

    async def settle_spend(self, reservation_id: str, actual: Spend) -> None:
        await self._execute(
            "WITH released AS (DELETE FROM reservations WHERE reservation_id = %s "
            "RETURNING tenant, day, judge) "
            "INSERT INTO usage (tenant, day, judge, calls, input_tokens, output_tokens, cost_usd) "
            f"SELECT tenant, day, judge, %s, %s, %s, %s FROM released {_ADD_USAGE}",
            (reservation_id, *dataclasses.astuple(actual)),
        )

    async def usage(self, tenant: str, day: str) -> UsageReport:
        # One statement, hence one snapshot: a settle moving spend from `reserved` to `today`
        # meanwhile is counted exactly once.
        rows = await self._fetchall(
            "SELECT 'today', judge, calls, input_tokens, output_tokens, cost_usd FROM usage "
            "WHERE tenant = %(tenant)s AND day = %(day)s "
            "UNION ALL SELECT 'total', judge, SUM(calls)::bigint, SUM(input_tokens)::bigint, "
            "SUM(output_tokens)::bigint, SUM(cost_usd) FROM usage WHERE tenant = %(tenant)s "
            "GROUP BY judge "
            f"UNION ALL SELECT 'reserved', '', * FROM ({_sums('reservations')}) held "
            "UNION ALL SELECT 'unfinished', '', COUNT(*), 0, 0, 0 FROM jobs "
            f"WHERE tenant = %(tenant)s AND {UNFINISHED_JOBS}",
            {"tenant": tenant, "day": day},
        )
        today: dict[str, Spend] = {}
        total: dict[str, Spend] = {}
        reserved, unfinished = Spend(), 0
        for part, judge, *spend in sorted(rows):
            if part == "today":
                today[judge] = spend_from_row(spend)
            elif part == "total":
                total[judge] = spend_from_row(spend)
            elif part == "reserved":
                reserved = spend_from_row(spend)
            else:
                unfinished = spend[0]
        return UsageReport(today, total, reserved, unfinished)

    async def close(self) -> None:
        await self._pool.close()


async def _job_by_request(conn: psycopg.AsyncConnection, job: JobRecord) -> JobRecord | None:
    cursor = await conn.execute(
        f"SELECT {_JOB_COLUMNS} FROM jobs WHERE tenant = %s AND request_id = %s",
        (job.tenant, job.request_id),
        binary=True,
    )
    row = await cursor.fetchone()
    return _job_from_row(row) if row else None


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


def _cache_arrays(entries: Sequence[CacheEntry]) -> dict[str, list[Any]]:
    # One INSERT may not update a row twice: of two entries for one key, the last one wins, as
    # it would if they were written one after the other.
    latest = {c.key: c.payload for c in entries}
    return {"keys": list(latest), "cache_payloads": list(latest.values())}


def _settlement_arrays(settlements: Sequence[Settlement]) -> dict[str, list[Any]]:
    return {
        "settled_ids": [s.reservation_id for s in settlements],
        "settled_calls": [s.actual.calls for s in settlements],
        "settled_input": [s.actual.input_tokens for s in settlements],
        "settled_output": [s.actual.output_tokens for s in settlements],
        "settled_cost": [s.actual.cost_usd for s in settlements],
    }


async def _ensure_tenant(conn: psycopg.AsyncConnection, tenant: str, now: float) -> None:
    defaults = DEFAULT_LIMITS.given()
    columns = [sql.Identifier(name) for name in defaults]
    await conn.execute(
        sql.SQL(
            "INSERT INTO tenants (tenant, allow_server_provider_keys, create_time, update_time"
            "{columns}) VALUES (%s, TRUE, %s, %s{marks}) ON CONFLICT (tenant) DO NOTHING"
        ).format(
            columns=sql.SQL("").join(sql.SQL(", {}").format(c) for c in columns),
            marks=sql.SQL(", %s" * len(columns)),
        ),
        (tenant, now, now, *defaults.values()),
    )


def _qualification(row: tuple) -> QualificationRecord:
    qualification_id, tenant, judge_identity, created, usable, weight, payload = row
    return QualificationRecord(
        qualification_id, tenant, judge_identity, created, usable, weight, bytes(payload)
    )
