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
import fcntl
import os
import queue
import sqlite3
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

import structlog

from tierank.server.storage.base import (
    CacheEntry,
    DuplicateRequest,
    EventRow,
    JobRecord,
    JobUpdate,
    JournalRow,
    Storage,
    StorageDamaged,
    StorageError,
    StorageFull,
    VerdictAudit,
)

T = TypeVar("T")
_MAX_GROUP = 512
_TERMINAL_STATES = "3, 4, 5"  # JobState SUCCEEDED, FAILED, CANCELLED

_SCHEMA = """
CREATE TABLE IF NOT EXISTS jobs (
    job_id TEXT PRIMARY KEY,
    tenant TEXT NOT NULL,
    request_id TEXT NOT NULL,
    state INTEGER NOT NULL,
    spec BLOB NOT NULL,
    query TEXT NOT NULL,
    candidate_count INTEGER NOT NULL,
    create_time REAL NOT NULL,
    update_time REAL NOT NULL,
    last_sequence INTEGER NOT NULL DEFAULT 0,
    completion_reason INTEGER NOT NULL DEFAULT 0,
    error_code INTEGER NOT NULL DEFAULT 0,
    error_message TEXT NOT NULL DEFAULT ''
);
CREATE UNIQUE INDEX IF NOT EXISTS jobs_request ON jobs (tenant, request_id)
    WHERE request_id != '';
CREATE INDEX IF NOT EXISTS jobs_state ON jobs (state);
CREATE TABLE IF NOT EXISTS events (
    job_id TEXT NOT NULL,
    sequence INTEGER NOT NULL,
    kind TEXT NOT NULL,
    time REAL NOT NULL,
    payload BLOB NOT NULL,
    PRIMARY KEY (job_id, sequence)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS events_kind ON events (job_id, kind, sequence);
CREATE TABLE IF NOT EXISTS journal (
    job_id TEXT NOT NULL,
    idx INTEGER NOT NULL,
    kind TEXT NOT NULL,
    payload BLOB NOT NULL,
    PRIMARY KEY (job_id, idx)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS verdict_cache (
    key TEXT PRIMARY KEY,
    payload BLOB NOT NULL
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS verdict_audit (
    job_id TEXT NOT NULL,
    call_id TEXT NOT NULL,
    verdict BLOB NOT NULL,
    prompt TEXT NOT NULL,
    raw_answer TEXT NOT NULL,
    PRIMARY KEY (job_id, call_id)
) WITHOUT ROWID;
"""


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
    conn.execute("PRAGMA journal_mode=WAL")
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


def _resolve(future: asyncio.Future[Any], ok: bool, value: Any) -> None:
    if future.cancelled():
        return
    if ok:
        future.set_result(value)
    else:
        future.set_exception(value)


def _job_from_row(row: sqlite3.Row | tuple[Any, ...]) -> JobRecord:
    return JobRecord(*row)


_JOB_COLUMNS = (
    "job_id, tenant, request_id, state, spec, query, candidate_count, create_time, "
    "update_time, last_sequence, completion_reason, error_code, error_message"
)


class SqliteStorage(Storage):
    def __init__(self, path: str | os.PathLike[str], synchronous: str = "FULL") -> None:
        """Open (or create) the database; raises DatabaseLocked when another server holds it,
        StorageDamaged when the file is not a tierank database or cannot be read."""
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock_fd = _lock(self.path)
        try:
            writer_conn, reader_conn = _open(self.path, synchronous)
        except BaseException:
            os.close(self._lock_fd)
            raise
        self._writer = _Worker(writer_conn, "tierank-sqlite-writer", transactional=True)
        self._reader = _Worker(reader_conn, "tierank-sqlite-reader", transactional=False)

    async def create_job(self, job: JobRecord, first_event: EventRow) -> JobRecord:
        def write(conn: sqlite3.Connection) -> JobRecord | None:
            if job.request_id:
                row = conn.execute(
                    f"SELECT {_JOB_COLUMNS} FROM jobs WHERE tenant = ? AND request_id = ?",
                    (job.tenant, job.request_id),
                ).fetchone()
                if row:
                    return _job_from_row(row)
            conn.execute(
                f"INSERT INTO jobs ({_JOB_COLUMNS}) VALUES ({', '.join('?' * 13)})",
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
                ),
            )
            _insert_events(conn, job.job_id, [first_event])
            return None

        existing = await self._writer.submit(write)
        if existing is not None:
            raise DuplicateRequest(existing)
        return JobRecord(**{**job.__dict__, "last_sequence": first_event.sequence})

    async def get_job(self, job_id: str) -> JobRecord | None:
        def read(conn: sqlite3.Connection) -> JobRecord | None:
            row = conn.execute(
                f"SELECT {_JOB_COLUMNS} FROM jobs WHERE job_id = ?", (job_id,)
            ).fetchone()
            return _job_from_row(row) if row else None

        return await self._reader.submit(read)

    async def list_jobs(
        self, tenant: str, state: int | None, page_size: int, before_job_id: str | None
    ) -> list[JobRecord]:
        clauses, params = ["tenant = ?"], [tenant]
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
                f"SELECT {_JOB_COLUMNS} FROM jobs WHERE state NOT IN ({_TERMINAL_STATES}) "
                "ORDER BY job_id"
            )
            return [_job_from_row(r) for r in rows]

        return await self._reader.submit(read)

    async def commit(self, job_id: str, update: JobUpdate) -> None:
        def write(conn: sqlite3.Connection) -> None:
            _insert_events(conn, job_id, update.events)
            conn.executemany(
                "INSERT INTO journal (job_id, idx, kind, payload) VALUES (?, ?, ?, ?)",
                [(job_id, j.index, j.kind, j.payload) for j in update.journal],
            )
            _put_cache(conn, update.cache)
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

    async def read_events(
        self, job_id: str, after_sequence: int, limit: int, max_bytes: int
    ) -> list[EventRow]:
        def read(conn: sqlite3.Connection) -> list[EventRow]:
            rows = conn.execute(
                "SELECT sequence, kind, time, payload FROM events "
                "WHERE job_id = ? AND sequence > ? ORDER BY sequence LIMIT ?",
                (job_id, after_sequence, limit),
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

    async def latest_event(self, job_id: str, kinds: Sequence[str]) -> EventRow | None:
        marks = ", ".join("?" * len(kinds))

        def read(conn: sqlite3.Connection) -> EventRow | None:
            row = conn.execute(
                "SELECT sequence, kind, time, payload FROM events "
                f"WHERE job_id = ? AND kind IN ({marks}) ORDER BY sequence DESC LIMIT 1",
                (job_id, *kinds),
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

    async def read_audit(self, job_id: str, call_id: str) -> VerdictAudit | None:
        def read(conn: sqlite3.Connection) -> VerdictAudit | None:
            row = conn.execute(
                "SELECT call_id, verdict, prompt, raw_answer FROM verdict_audit "
                "WHERE job_id = ? AND call_id = ?",
                (job_id, call_id),
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

    async def close(self) -> None:
        await asyncio.to_thread(self._writer.stop)
        await asyncio.to_thread(self._reader.stop)
        # Only now: closing any descriptor of the file drops SQLite's own POSIX locks on it.
        os.close(self._lock_fd)


def _lock(path: Path) -> int:
    """Lock the database file itself, so that no second name for it (a symlink, a hard link,
    a relative path) lets a second server in; returns the descriptor that holds the lock."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise DatabaseLocked(f"another tierank server is using {path}") from None
    return fd


def _open(path: Path, synchronous: str) -> tuple[sqlite3.Connection, sqlite3.Connection]:
    """The writer's and the reader's connections, after checking the file is sound."""
    opened: list[sqlite3.Connection] = []
    try:
        opened.append(_connect(str(path), synchronous))
        opened[0].executescript(_SCHEMA)
        _check_integrity(opened[0], path)
        opened.append(_connect(str(path), synchronous))
        return opened[0], opened[1]
    except sqlite3.Error as error:
        for conn in opened:
            conn.close()
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
