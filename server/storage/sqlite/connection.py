"""The SQLite database's file, its lock, and the two threads that own its connections.

Every SQLite error leaves this package as a StorageError in plain words (plain_error).
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
import queue
import sqlite3
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import structlog

from tierank.server.errors import StorageDamaged, StorageError, StorageFull
from tierank.server.storage.sqlite.migrations import apply_migrations

T = TypeVar("T")
_MAX_GROUP = 512
_DAMAGED_CODES = frozenset({sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_NOTADB})
# Driver messages can quote a damaged row's bytes; a client is told the gist only.
_MAX_DETAIL = 200
# How many lines of `PRAGMA quick_check` findings the start-up log shows.
_DAMAGE_REPORT_LINES = 10


class DatabaseLocked(RuntimeError):
    """Another server process holds this database."""


def plain_error(error: Exception) -> Exception:
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


class Worker:
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
                outcomes.append((False, plain_error(error)))
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
                    outcomes.append((False, plain_error(error)))
            conn.execute("COMMIT")
        except Exception as error:
            # A full disk fails the COMMIT, or an item, after which SQLite may have rolled the
            # whole transaction back already (so the item's rollback fails too): the group is
            # undone, each caller learns the first cause, and this thread lives on.
            if conn.in_transaction:
                with contextlib.suppress(sqlite3.Error):
                    conn.execute("ROLLBACK")
            return [(False, plain_error(item_error or error))] * len(group)
        return outcomes


def _resolve(future: asyncio.Future[Any], ok: bool, value: Any) -> None:
    if future.cancelled():
        return
    if ok:
        future.set_result(value)
    else:
        future.set_exception(value)


class SqliteState:
    """What the roles of SqliteStorage share: the database's file and lock, the writer and the
    reader (see the package's docstring), and the leases and watch streams, which live in
    memory (server/storage/sqlite/leases.py)."""

    path: Path
    _lock_fd: int
    _writer: Worker
    _reader: Worker
    _leases: dict[str, int]  # job id -> the epoch of its current lease
    _epochs: Iterator[int]
    _cancel_requested: set[str]
    _watchers: dict[str, str]  # open watch streams: id -> tenant
    _orphans_settled: bool
    _study_leases: dict[str, tuple[str, float]]  # study id -> (owner, until), time.time()
    _batch_polls: dict[str, tuple[str, float]]  # provider batch id -> (poller, until)


def file_problem(error: OSError) -> str:
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


def lock_file(path: Path) -> int:
    """Lock the database file itself, so that no second name for it (a symlink, a hard link,
    a relative path) lets a second server in; returns the descriptor that holds the lock."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise DatabaseLocked(f"another tierank server{_announced(path)} is using {path}") from None
    return fd


def address_file(path: Path) -> Path:
    """Where the server holding `path` writes "HOST:PORT PID" once it serves."""
    return path.with_name(path.name + ".address")


def _announced(path: Path) -> str:
    """ " (serving HOST:PORT, pid N)" as the holder of `path` announced it; "" before it has."""
    try:
        address, pid = address_file(path).read_text().split()
    except (OSError, ValueError):
        return ""
    return f" (serving {address}, pid {pid})"


def open_connections(path: Path, synchronous: str) -> tuple[sqlite3.Connection, sqlite3.Connection]:
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
        plain = plain_error(error)
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
        if not isinstance(plain_error(error), StorageDamaged):
            raise
        findings = [str(error)]
    if findings != ["ok"]:
        structlog.get_logger().error(
            "database is damaged; damaged rows may be missing or unreadable",
            db=str(path),
            problems=len(findings),
            first=findings[:_DAMAGE_REPORT_LINES],
        )


@contextlib.contextmanager
def snapshot(conn: sqlite3.Connection) -> Iterator[None]:
    """Several reads that see one state of the database (the reader runs in autocommit)."""
    conn.execute("BEGIN")
    try:
        yield
    finally:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
