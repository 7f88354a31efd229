"""SQLite storage: WAL, one writer thread that group-commits, one reader thread.

Why a dedicated writer: SQLite allows one writer at a time, and a commit's fsync is the
expensive part. Queuing writes to one thread lets every commit carry all the writes that
arrived meanwhile (group commit), while each caller still resumes only after its own write is
durable. Each write runs in its own savepoint, so one failing write never undoes another.

Every SQLite error leaves this module as a StorageError in plain words: StorageFull when the
disk is full (writes fail, reads go on), StorageDamaged when stored data cannot be read back.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import fcntl
import itertools
import os
import queue
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, TypeVar

import structlog

from tierank.server.errors import (
    LeaseLost,
    QuotaExceeded,
    StorageDamaged,
    StorageError,
    StorageFull,
)
from tierank.server.job_states import TERMINAL_STATES
from tierank.server.storage.base import (
    DEFAULT_LIMITS,
    LIMIT_NAMES,
    CacheEntry,
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
from tierank.server.storage.rules import (
    MIN_RETRY_AFTER_S,
    RATE_WINDOW_S,
    check_daily_limits,
    operation_from_row,
    plus,
    spend_from_row,
    tenant_from_row,
)
from tierank.server.storage.sqlite_migrations import UNFINISHED_JOBS, apply_migrations

T = TypeVar("T")
_MAX_GROUP = 512
_NO_LIMITS = Limits()


class DatabaseLocked(RuntimeError):
    """Another server process holds this database."""


_DAMAGED_CODES = frozenset({sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_NOTADB})
# Driver messages can quote a damaged row's bytes; a client is told the gist only.
_MAX_DETAIL = 200
# How many lines of `PRAGMA quick_check` findings the start-up log shows.
_DAMAGE_REPORT_LINES = 10


def _plain(error: Exception) -> Exception:
    """A driver error as a StorageError in plain words (never the driver's class name); any
    other error as it is."""
    if not isinstance(error, sqlite3.Error):
        return error
    code = getattr(error, "sqlite_errorcode", None)
    detail = str(error)[:_MAX_DETAIL]
    if code == sqlite3.SQLITE_FULL:
        return StorageFull(f"the disk holding the database is full ({detail})")
    # A damaged TEXT column is reported by the driver, not by SQLite, and carries no code.
    if code in _DAMAGED_CODES or "decode" in detail:
        return StorageDamaged(f"the database is damaged: {detail}")
    return StorageError(f"the database failed: {detail}")


def _connect(path: str, synchronous: str) -> sqlite3.Connection:
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    conn.execute(f"PRAGMA synchronous={synchronous}")
    conn.execute("PRAGMA busy_timeout=5000")
    return conn


class _Worker:
    """A thread that owns one connection and runs submitted functions on it."""

    def __init__(self, conn: sqlite3.Connection, name: str, transactional: bool) -> None:
        self._conn = conn
        self._transactional = transactional
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    async def submit(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()
        self._queue.put((fn, future, loop))
        return await future

    def stop(self) -> None:
        self._queue.put(None)
        self._thread.join()
        self._conn.close()

    def _run(self) -> None:
        while True:
            first = self._queue.get()
            if first is None:
                return
            group = [first]
            while len(group) < _MAX_GROUP:
                try:
                    item = self._queue.get_nowait()
                except queue.Empty:
                    break
                if item is None:
                    self._queue.put(None)
                    break
                group.append(item)
            outcomes = self._run_group(group) if self._transactional else self._run_each(group)
            for (_, future, loop), (ok, value) in zip(group, outcomes, strict=True):
                loop.call_soon_threadsafe(_resolve, future, ok, value)

    def _run_each(self, group: list[Any]) -> list[tuple[bool, Any]]:
        outcomes = []
        for fn, _, _ in group:
            try:
                outcomes.append((True, fn(self._conn)))
            except Exception as error:  # delivered to the awaiting caller
                outcomes.append((False, _plain(error)))
        return outcomes

    def _run_group(self, group: list[Any]) -> list[tuple[bool, Any]]:
        conn = self._conn
        outcomes: list[tuple[bool, Any]] = []
        item_error: Exception | None = None
        try:
            conn.execute("BEGIN IMMEDIATE")
            for fn, _, _ in group:
                conn.execute("SAVEPOINT item")
                try:
                    outcomes.append((True, fn(conn)))
                    conn.execute("RELEASE item")
                except Exception as error:
                    item_error = error
                    conn.execute("ROLLBACK TO item")
                    conn.execute("RELEASE item")
                    item_error = None
                    outcomes.append((False, _plain(error)))
            conn.execute("COMMIT")
        except Exception as error:
            # A full disk fails the COMMIT, or an item, after which SQLite may have rolled the
            # whole transaction back already (so the item's rollback fails too): the group is
            # undone, each caller learns the first cause, and this thread lives on.
            if conn.in_transaction:
                with contextlib.suppress(sqlite3.Error):
                    conn.execute("ROLLBACK")
            return [(False, _plain(item_error or error))] * len(group)
        return outcomes


def _settle(conn: sqlite3.Connection, settlement: Settlement) -> None:
    row = conn.execute(
        "SELECT tenant, day, judge FROM reservations WHERE reservation_id = ?",
        (settlement.reservation_id,),
    ).fetchone()
    if row is None:
        return
    conn.execute("DELETE FROM reservations WHERE reservation_id = ?", (settlement.reservation_id,))
    _add_usage(conn, [(*row, *dataclasses.astuple(settlement.actual))])


def _operation(row: Sequence[Any]) -> OperationRecord:
    return operation_from_row(row, row[12])


def _resolve(future: asyncio.Future[Any], ok: bool, value: Any) -> None:
    if future.cancelled():
        return
    if ok:
        future.set_result(value)
    else:
        future.set_exception(value)


def _job_from_row(row: sqlite3.Row | tuple[Any, ...]) -> JobRecord:
    return JobRecord(*row)


# Another tenant's job must look like no job at all: rows of a job are read only while the job
# belongs to the caller's tenant (one primary-key lookup, evaluated once per statement).
_OWNED = "EXISTS (SELECT 1 FROM jobs WHERE jobs.job_id = ? AND jobs.tenant = ?)"

_JOB_COLUMNS = (
    "job_id, tenant, request_id, state, spec, query, candidate_count, create_time, "
    "update_time, last_sequence, completion_reason, error_code, error_message, trace_context"
)


_QUALIFICATION_COLUMNS = (
    "qualification_id, tenant, judge_identity, create_time, usable, weight, payload"
)


_OPERATION_COLUMNS = (
    "operation_id, tenant, request_id, request_digest, method, state, owner, create_time, "
    "update_time, progress, result, error_code, error_message, cancel_requested"
)


def _qualification(row: Sequence[Any]) -> QualificationRecord:
    qualification_id, tenant, judge_identity, created, usable, weight, payload = row
    return QualificationRecord(
        qualification_id, tenant, judge_identity, created, bool(usable), weight, bytes(payload)
    )


class SqliteStorage(Storage):
    def __init__(self, path: str | os.PathLike[str], synchronous: str) -> None:
        """Open (or create) the database with PRAGMA synchronous=`synchronous` (FULL or NORMAL,
        checked by the server's settings); raises DatabaseLocked when another server holds it,
        StorageDamaged when the file is not a tierank database or cannot be read."""
        self.path = Path(path)
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._lock_fd = _lock(self.path)
        except OSError as error:
            raise StorageError(f"cannot open the database {path}: {_file_problem(error)}") from None
        # Left by a server that was killed: whoever holds the lock now has not announced yet.
        _address_file(self.path).unlink(missing_ok=True)
        try:
            writer_conn, reader_conn = _open(self.path, synchronous)
        except BaseException:
            os.close(self._lock_fd)
            raise
        self._writer = _Worker(writer_conn, "tierank-sqlite-writer", transactional=True)
        self._reader = _Worker(reader_conn, "tierank-sqlite-reader", transactional=False)
        # The file lock makes this process the database's only server, so leases live in
        # memory: every lease in the file's past belonged to a process that is gone.
        self._leases: dict[str, int] = {}
        self._epochs = itertools.count(1)
        self._cancel_requested: set[str] = set()
        self._watchers: dict[str, str] = {}  # open watch streams: id -> tenant
        self._orphans_settled = False

    async def create_job(
        self, job: JobRecord, first_event: EventRow, limits: Limits = _NO_LIMITS
    ) -> JobRecord:
        def write(conn: sqlite3.Connection) -> JobRecord | None:
            if job.request_id:
                row = conn.execute(
                    f"SELECT {_JOB_COLUMNS} FROM jobs WHERE tenant = ? AND request_id = ?",
                    (job.tenant, job.request_id),
                ).fetchone()
                if row:
                    return _job_from_row(row)
            _check_job_quotas(conn, job, limits)
            conn.execute(
                f"INSERT INTO jobs ({_JOB_COLUMNS}) VALUES ({', '.join('?' * 14)})",
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
            return None

        existing = await self._writer.submit(write)
        if existing is not None:
            raise DuplicateRequest(existing)
        return JobRecord(**{**job.__dict__, "last_sequence": first_event.sequence})

    async def get_job(self, tenant: str, job_id: str) -> JobRecord | None:
        def read(conn: sqlite3.Connection) -> JobRecord | None:
            row = conn.execute(
                f"SELECT {_JOB_COLUMNS} FROM jobs WHERE job_id = ? AND tenant = ?",
                (job_id, tenant),
            ).fetchone()
            return _job_from_row(row) if row else None

        return await self._reader.submit(read)

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
            f"SELECT {_JOB_COLUMNS} FROM jobs WHERE {' AND '.join(clauses)} "
            "ORDER BY job_id DESC LIMIT ?"
        )

        def read(conn: sqlite3.Connection) -> list[JobRecord]:
            return [_job_from_row(r) for r in conn.execute(sql, (*params, page_size))]

        return await self._reader.submit(read)

    async def unfinished_jobs(self) -> list[JobRecord]:
        def read(conn: sqlite3.Connection) -> list[JobRecord]:
            rows = conn.execute(
                f"SELECT {_JOB_COLUMNS} FROM jobs WHERE {UNFINISHED_JOBS} ORDER BY job_id"
            )
            return [_job_from_row(r) for r in rows]

        return await self._reader.submit(read)

    async def commit(self, job_id: str, update: JobUpdate, fence: Lease | None = None) -> None:
        if fence is not None and self._leases.get(job_id) != fence.epoch:
            raise LeaseLost(f"job {job_id} is not leased to {fence.owner} any more")

        def write(conn: sqlite3.Connection) -> None:
            _insert_events(conn, job_id, update.events)
            conn.executemany(
                "INSERT INTO journal (job_id, idx, kind, payload) VALUES (?, ?, ?, ?)",
                [(job_id, j.index, j.kind, j.payload) for j in update.journal],
            )
            _put_cache(conn, update.cache)
            for settlement in update.settlements:
                _settle(conn, settlement)
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
        if update.state in TERMINAL_STATES:
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

    async def cache_get(self, key: str) -> bytes | None:
        def read(conn: sqlite3.Connection) -> bytes | None:
            row = conn.execute("SELECT payload FROM verdict_cache WHERE key = ?", (key,)).fetchone()
            return row[0] if row else None

        return await self._reader.submit(read)

    async def cache_put(self, entries: Sequence[CacheEntry]) -> None:
        await self._writer.submit(lambda conn: _put_cache(conn, entries))

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
            changes["allow_server_provider_keys"] = int(allow_server_provider_keys)
        changes["update_time"] = now
        assignments = ", ".join(f"{column} = ?" for column in changes)

        def write(conn: sqlite3.Connection) -> TenantRecord:
            _ensure_tenant(conn, tenant, now)
            conn.execute(
                f"UPDATE tenants SET {assignments} WHERE tenant = ?", (*changes.values(), tenant)
            )
            record = _read_tenant(conn, tenant)
            assert record is not None  # ensured above, in this transaction
            return record

        return await self._writer.submit(write)

    async def get_tenant(self, tenant: str) -> TenantRecord | None:
        def read(conn: sqlite3.Connection) -> TenantRecord | None:
            with _snapshot(conn):
                return _read_tenant(conn, tenant)

        return await self._reader.submit(read)

    async def list_tenants(self) -> list[TenantRecord]:
        def read(conn: sqlite3.Connection) -> list[TenantRecord]:
            with _snapshot(conn):
                providers: dict[str, list[str]] = {}
                for tenant, provider in conn.execute(
                    "SELECT tenant, provider FROM provider_keys ORDER BY tenant, provider"
                ):
                    providers.setdefault(tenant, []).append(provider)
                rows = conn.execute(f"SELECT {_TENANT_COLUMNS} FROM tenants ORDER BY tenant")
                return [tenant_from_row(row, providers.get(row[0], ())) for row in rows]

        return await self._reader.submit(read)

    async def create_key(self, key: KeyRecord) -> None:
        def write(conn: sqlite3.Connection) -> None:
            _ensure_tenant(conn, key.tenant, key.create_time)
            conn.execute(
                f"INSERT INTO api_keys ({_KEY_COLUMNS}) VALUES ({', '.join('?' * 8)})",
                dataclasses.astuple(key),
            )

        await self._writer.submit(write)

    async def get_key(self, key_id: str) -> KeyRecord | None:
        def read(conn: sqlite3.Connection) -> KeyRecord | None:
            row = conn.execute(
                f"SELECT {_KEY_COLUMNS} FROM api_keys WHERE key_id = ?", (key_id,)
            ).fetchone()
            return KeyRecord(*row) if row else None

        return await self._reader.submit(read)

    async def key_for_subject(self, certificate_subject: str) -> KeyRecord | None:
        if not certificate_subject:
            return None

        def read(conn: sqlite3.Connection) -> KeyRecord | None:
            # Should two live keys name one subject, the newest wins: mapping a certificate to
            # a new key takes effect at once. The `!= ''` term lets SQLite use the partial
            # index api_keys_subject.
            row = conn.execute(
                f"SELECT {_KEY_COLUMNS} FROM api_keys "
                "WHERE certificate_subject = ? AND certificate_subject != '' "
                "AND revoke_time IS NULL ORDER BY create_time DESC, key_id DESC LIMIT 1",
                (certificate_subject,),
            ).fetchone()
            return KeyRecord(*row) if row else None

        return await self._reader.submit(read)

    async def list_keys(self, tenant: str | None, include_revoked: bool) -> list[KeyRecord]:
        clauses, params = ["1"], []
        if tenant is not None:
            clauses.append("tenant = ?")
            params.append(tenant)
        if not include_revoked:
            clauses.append("revoke_time IS NULL")
        sql = (
            f"SELECT {_KEY_COLUMNS} FROM api_keys WHERE {' AND '.join(clauses)} "
            "ORDER BY create_time, key_id"
        )

        def read(conn: sqlite3.Connection) -> list[KeyRecord]:
            return [KeyRecord(*row) for row in conn.execute(sql, params)]

        return await self._reader.submit(read)

    async def revoke_key(self, key_id: str, now: float) -> KeyRecord | None:
        def write(conn: sqlite3.Connection) -> KeyRecord | None:
            conn.execute(
                "UPDATE api_keys SET revoke_time = COALESCE(revoke_time, ?) WHERE key_id = ?",
                (now, key_id),
            )
            row = conn.execute(
                f"SELECT {_KEY_COLUMNS} FROM api_keys WHERE key_id = ?", (key_id,)
            ).fetchone()
            return KeyRecord(*row) if row else None

        return await self._writer.submit(write)

    async def set_provider_key(
        self, tenant: str, provider: str, sealed: bytes | None
    ) -> TenantRecord | None:
        def write(conn: sqlite3.Connection) -> TenantRecord | None:
            if conn.execute("SELECT 1 FROM tenants WHERE tenant = ?", (tenant,)).fetchone() is None:
                return None
            if sealed is None:
                conn.execute(
                    "DELETE FROM provider_keys WHERE tenant = ? AND provider = ?",
                    (tenant, provider),
                )
            else:
                conn.execute(
                    "INSERT OR REPLACE INTO provider_keys (tenant, provider, sealed) "
                    "VALUES (?, ?, ?)",
                    (tenant, provider, sealed),
                )
            return _read_tenant(conn, tenant)

        return await self._writer.submit(write)

    async def provider_key(self, tenant: str, provider: str) -> bytes | None:
        def read(conn: sqlite3.Connection) -> bytes | None:
            row = conn.execute(
                "SELECT sealed FROM provider_keys WHERE tenant = ? AND provider = ?",
                (tenant, provider),
            ).fetchone()
            return row[0] if row else None

        return await self._reader.submit(read)

    async def reserve_spend(self, reservation: Reservation) -> None:
        r = reservation

        def write(conn: sqlite3.Connection) -> None:
            row = conn.execute(
                "SELECT daily_judge_calls, daily_input_tokens, daily_cost_usd FROM tenants "
                "WHERE tenant = ?",
                (r.tenant,),
            ).fetchone()
            if row is not None and any(limit is not None for limit in row):
                settled = spend_from_row(
                    conn.execute(
                        f"SELECT {_SPEND_SUMS} FROM usage WHERE tenant = ? AND day = ?",
                        (r.tenant, r.day),
                    ).fetchone()
                )
                held = spend_from_row(
                    conn.execute(
                        f"SELECT {_SPEND_SUMS} FROM reservations WHERE tenant = ? AND day = ?",
                        (r.tenant, r.day),
                    ).fetchone()
                )
                check_daily_limits(row, plus(plus(settled, held), r.spend))
            conn.execute(
                "INSERT INTO reservations (reservation_id, tenant, day, judge, calls, "
                "input_tokens, output_tokens, cost_usd) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (r.reservation_id, r.tenant, r.day, r.judge, *dataclasses.astuple(r.spend)),
            )

        await self._writer.submit(write)

    async def settle_spend(self, reservation_id: str, actual: Spend) -> None:
        await self._writer.submit(lambda conn: _settle(conn, Settlement(reservation_id, actual)))

    # -- leases (in memory: see __init__) -----------------------------------------------------

    async def heartbeat(self, replica: str, ttl_s: float, draining: bool = False) -> Membership:
        if not self._orphans_settled:
            released = await self._settle_orphans()
            self._orphans_settled = True
            if released:
                # Calls in flight when the last server stopped may have been paid for.
                structlog.get_logger().info(
                    "settled reservations left by the last run", count=released
                )
        (unfinished,) = await self._reader.submit(
            lambda conn: conn.execute(
                f"SELECT COUNT(*) FROM jobs WHERE {UNFINISHED_JOBS}"
            ).fetchone()
        )
        return Membership(live_replicas=0 if draining else 1, unfinished_jobs=unfinished)

    async def leave(self, replica: str) -> None:
        self._leases.clear()

    async def claim_jobs(self, owner: str, lease_s: float, limit: int) -> list[Claim]:
        free = [job for job in await self.unfinished_jobs() if job.job_id not in self._leases]
        return [self._claim(job, owner) for job in free[: max(limit, 0)]]

    async def claim_job(self, job_id: str, owner: str, lease_s: float) -> Claim | None:
        if job_id in self._leases:
            return None

        def read(conn: sqlite3.Connection) -> JobRecord | None:
            row = conn.execute(
                f"SELECT {_JOB_COLUMNS} FROM jobs WHERE job_id = ? AND {UNFINISHED_JOBS}", (job_id,)
            ).fetchone()
            return _job_from_row(row) if row else None

        job = await self._reader.submit(read)
        return None if job is None or job_id in self._leases else self._claim(job, owner)

    def _claim(self, job: JobRecord, owner: str) -> Claim:
        epoch = next(self._epochs)
        self._leases[job.job_id] = epoch
        return Claim(job, Lease(job.job_id, owner, epoch), job.job_id in self._cancel_requested)

    async def renew_leases(self, leases: Sequence[Lease], lease_s: float) -> dict[str, bool]:
        return {
            lease.job_id: lease.job_id in self._cancel_requested
            for lease in leases
            if self._leases.get(lease.job_id) == lease.epoch
        }

    async def release_lease(self, lease: Lease) -> None:
        if self._leases.get(lease.job_id) == lease.epoch:
            del self._leases[lease.job_id]

    async def request_cancel(self, tenant: str, job_id: str) -> bool:
        job = await self.get_job(tenant, job_id)
        if job is None or job.state in TERMINAL_STATES:
            return False
        self._cancel_requested.add(job_id)
        return True

    async def hold_watcher(self, watch_id: str, replica: str, tenant: str, limit: int) -> None:
        if sum(held == tenant for held in self._watchers.values()) >= limit:
            raise QuotaExceeded("max_watchers", limit)
        self._watchers[watch_id] = tenant

    async def release_watcher(self, watch_id: str) -> None:
        self._watchers.pop(watch_id, None)

    async def put_qualification(self, record: QualificationRecord) -> None:
        def write(conn: sqlite3.Connection) -> None:
            conn.execute(
                f"INSERT INTO qualifications ({_QUALIFICATION_COLUMNS}) "
                "VALUES (?, ?, ?, ?, ?, ?, ?)",
                dataclasses.astuple(record),
            )

        await self._writer.submit(write)

    async def list_qualifications(
        self, tenant: str, judge_identity: str | None, limit: int
    ) -> list[QualificationRecord]:
        clauses, params = ["tenant = ?"], [tenant]
        if judge_identity is not None:
            clauses.append("judge_identity = ?")
            params.append(judge_identity)
        query = (
            f"SELECT {_QUALIFICATION_COLUMNS} FROM qualifications WHERE {' AND '.join(clauses)} "
            "ORDER BY create_time DESC, qualification_id DESC LIMIT ?"
        )

        def read(conn: sqlite3.Connection) -> list[QualificationRecord]:
            rows = conn.execute(query, (*params, limit)).fetchall()
            return [_qualification(row) for row in rows]

        return await self._reader.submit(read)

    async def delete_qualification(
        self, tenant: str, qualification_id: str
    ) -> QualificationRecord | None:
        def write(conn: sqlite3.Connection) -> QualificationRecord | None:
            row = conn.execute(
                f"DELETE FROM qualifications WHERE tenant = ? AND qualification_id = ? "
                f"RETURNING {_QUALIFICATION_COLUMNS}",
                (tenant, qualification_id),
            ).fetchone()
            return None if row is None else _qualification(row)

        return await self._writer.submit(write)

    async def ping(self) -> None:
        await self._reader.submit(lambda conn: conn.execute("SELECT 1").fetchone())

    async def _settle_orphans(self) -> int:
        def write(conn: sqlite3.Connection) -> int:
            rows = conn.execute(
                "SELECT tenant, day, judge, calls, input_tokens, output_tokens, cost_usd "
                "FROM reservations"
            ).fetchall()
            # Nothing open is the usual start, and it must work on a full disk: no write then.
            if rows:
                _add_usage(conn, rows)
                conn.execute("DELETE FROM reservations")
            return len(rows)

        return await self._writer.submit(write)

    async def usage(self, tenant: str, day: str) -> UsageReport:
        def read(conn: sqlite3.Connection) -> UsageReport:
            # One snapshot: a settle moving spend from `reserved` to `today` between two of
            # these reads would otherwise be counted twice or not at all.
            with _snapshot(conn):
                today = {
                    row[0]: spend_from_row(row[1:])
                    for row in conn.execute(
                        "SELECT judge, calls, input_tokens, output_tokens, cost_usd FROM usage "
                        "WHERE tenant = ? AND day = ? ORDER BY judge",
                        (tenant, day),
                    )
                }
                total = {
                    row[0]: spend_from_row(row[1:])
                    for row in conn.execute(
                        f"SELECT judge, {_SPEND_SUMS} FROM usage WHERE tenant = ? "
                        "GROUP BY judge ORDER BY judge",
                        (tenant,),
                    )
                }
                reserved = spend_from_row(
                    conn.execute(
                        f"SELECT {_SPEND_SUMS} FROM reservations WHERE tenant = ? AND day = ?",
                        (tenant, day),
                    ).fetchone()
                )
                (unfinished,) = conn.execute(
                    f"SELECT COUNT(*) FROM jobs WHERE tenant = ? AND {UNFINISHED_JOBS}", (tenant,)
                ).fetchone()
            return UsageReport(today, total, reserved, unfinished)

        return await self._reader.submit(read)

    async def create_operation(self, record: OperationRecord) -> OperationRecord:
        def write(conn: sqlite3.Connection) -> OperationRecord:
            if record.request_id:
                row = conn.execute(
                    f"SELECT {_OPERATION_COLUMNS} FROM operations "
                    "WHERE tenant = ? AND request_id = ?",
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

    def announce(self, address: str) -> None:
        # Only a hint for a second command's message: a full disk or a read-only folder must
        # not stop a server that can serve (its jobs pause on writes until space is freed).
        with contextlib.suppress(OSError):
            _address_file(self.path).write_text(f"{address} {os.getpid()}\n")

    async def close(self) -> None:
        _address_file(self.path).unlink(missing_ok=True)
        await asyncio.to_thread(self._writer.stop)
        await asyncio.to_thread(self._reader.stop)
        # Only now: closing any descriptor of the file drops SQLite's own POSIX locks on it.
        os.close(self._lock_fd)


def _file_problem(error: OSError) -> str:
    """What is wrong with a database path, in words that name the fix."""
    if isinstance(error, IsADirectoryError):
        return "it is a directory; give a file in it, e.g. DIR/tierank.db"
    # mkdir finds a file where a directory of the path should be (FileExistsError), or
    # open does (NotADirectoryError).
    if isinstance(error, NotADirectoryError | FileExistsError):
        return "a part of the path is a file, not a directory"
    if isinstance(error, PermissionError):
        return "permission denied (this user cannot create or write it)"
    return error.strerror or str(error)


def _lock(path: Path) -> int:
    """Lock the database file itself, so that no second name for it (a symlink, a hard link,
    a relative path) lets a second server in; returns the descriptor that holds the lock."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise DatabaseLocked(f"another tierank server{_announced(path)} is using {path}") from None
    return fd


def _address_file(path: Path) -> Path:
    """Where the server holding `path` writes "HOST:PORT PID" once it serves."""
    return path.with_name(path.name + ".address")


def _announced(path: Path) -> str:
    """ " (serving HOST:PORT, pid N)" as the holder of `path` announced it; "" before it has."""
    try:
        address, pid = _address_file(path).read_text().split()
    except (OSError, ValueError):
        return ""
    return f" (serving {address}, pid {pid})"


def _open(path: Path, synchronous: str) -> tuple[sqlite3.Connection, sqlite3.Connection]:
    """The writer's and the reader's connections, after checking the file is sound."""
    opened: list[sqlite3.Connection] = []
    try:
        writer = _connect(str(path), synchronous)
        opened.append(writer)
        # Migrated before WAL mode is set, which rewrites the file's header: a database refused
        # for its schema version is left exactly as it was.
        apply_migrations(writer, path)
        writer.execute("PRAGMA journal_mode=WAL")
        _check_integrity(writer, path)
        reader = _connect(str(path), synchronous)
        opened.append(reader)
        return writer, reader
    except BaseException as error:
        for conn in opened:
            conn.close()
        if not isinstance(error, sqlite3.Error):
            raise
        plain = _plain(error)
        if isinstance(plain, StorageDamaged):
            raise StorageDamaged(
                f"{path} is not a tierank database or is damaged: {error}"
            ) from None
        raise type(plain)(f"{path}: {plain}") from None


def _check_integrity(conn: sqlite3.Connection, path: Path) -> None:
    """Log what `PRAGMA quick_check` finds damaged: a server that starts on a damaged file
    says so, instead of silently serving what is left."""
    try:
        findings = [row[0] for row in conn.execute("PRAGMA quick_check")]
    except sqlite3.DatabaseError as error:
        # Damage the check cannot get past; what can still be read is served.
        if not isinstance(_plain(error), StorageDamaged):
            raise
        findings = [str(error)]
    if findings != ["ok"]:
        structlog.get_logger().error(
            "database is damaged; damaged rows may be missing or unreadable",
            db=str(path),
            problems=len(findings),
            first=findings[:_DAMAGE_REPORT_LINES],
        )


def _put_cache(conn: sqlite3.Connection, entries: Sequence[CacheEntry]) -> None:
    conn.executemany(
        "INSERT OR REPLACE INTO verdict_cache (key, payload) VALUES (?, ?)",
        [(c.key, c.payload) for c in entries],
    )


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


@contextlib.contextmanager
def _snapshot(conn: sqlite3.Connection) -> Iterator[None]:
    """Several reads that see one state of the database (the reader runs in autocommit)."""
    conn.execute("BEGIN")
    try:
        yield
    finally:
        if conn.in_transaction:
            conn.execute("ROLLBACK")


_TENANT_COLUMNS = (
    f"tenant, {', '.join(LIMIT_NAMES)}, allow_server_provider_keys, create_time, update_time"
)
_KEY_COLUMNS = (
    "key_id, tenant, role, display_name, secret_hash, create_time, revoke_time, certificate_subject"
)
_SPEND_SUMS = (
    "COALESCE(SUM(calls), 0), COALESCE(SUM(input_tokens), 0), "
    "COALESCE(SUM(output_tokens), 0), TOTAL(cost_usd)"
)


def _read_tenant(conn: sqlite3.Connection, tenant: str) -> TenantRecord | None:
    row = conn.execute(
        f"SELECT {_TENANT_COLUMNS} FROM tenants WHERE tenant = ?", (tenant,)
    ).fetchone()
    if row is None:
        return None
    providers = conn.execute(
        "SELECT provider FROM provider_keys WHERE tenant = ? ORDER BY provider", (tenant,)
    )
    return tenant_from_row(row, [provider for (provider,) in providers])


def _ensure_tenant(conn: sqlite3.Connection, tenant: str, now: float) -> None:
    defaults = DEFAULT_LIMITS.given()
    columns = "".join(f", {name}" for name in defaults)
    marks = ", ?" * len(defaults)
    conn.execute(
        "INSERT OR IGNORE INTO tenants (tenant, allow_server_provider_keys, create_time, "
        f"update_time{columns}) VALUES (?, 1, ?, ?{marks})",
        (tenant, now, now, *defaults.values()),
    )


def _add_usage(conn: sqlite3.Connection, rows: Sequence[Sequence[Any]]) -> None:
    """Add (tenant, day, judge, calls, input_tokens, output_tokens, cost_usd) rows to usage."""
    conn.executemany(
        "INSERT INTO usage (tenant, day, judge, calls, input_tokens, output_tokens, cost_usd) "
        "VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (tenant, day, judge) DO UPDATE SET "
        "calls = calls + excluded.calls, input_tokens = input_tokens + excluded.input_tokens, "
        "output_tokens = output_tokens + excluded.output_tokens, "
        "cost_usd = cost_usd + excluded.cost_usd",
        rows,
    )
