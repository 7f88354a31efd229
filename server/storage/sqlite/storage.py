"""SqliteStorage: every role of storage on one SQLite file (see the package's docstring)."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
from pathlib import Path

from tierank.server.errors import StorageError
from tierank.server.storage.base import Storage, UnfinishedCounts
from tierank.server.storage.rules import UNFINISHED_COUNTS, unfinished_counts_from
from tierank.server.storage.sqlite.batches import SqliteProviderBatches
from tierank.server.storage.sqlite.cache import SqliteVerdictCache
from tierank.server.storage.sqlite.connection import (
    Worker,
    address_file,
    file_problem,
    lock_file,
    open_connections,
)
from tierank.server.storage.sqlite.jobs import SqliteJobs
from tierank.server.storage.sqlite.keys import SqliteKeys
from tierank.server.storage.sqlite.leases import SqliteLeases, SqliteWatchers
from tierank.server.storage.sqlite.operations import SqliteOperations
from tierank.server.storage.sqlite.qualifications import SqliteQualifications
from tierank.server.storage.sqlite.spend import SqliteSpend
from tierank.server.storage.sqlite.studies import SqliteStudies
from tierank.server.storage.sqlite.tenants import SqliteTenants


class SqliteStorage(
    SqliteJobs,
    SqliteLeases,
    SqliteWatchers,
    SqliteTenants,
    SqliteKeys,
    SqliteSpend,
    SqliteQualifications,
    SqliteVerdictCache,
    SqliteOperations,
    SqliteStudies,
    SqliteProviderBatches,
    Storage,
):
    def __init__(self, path: str | os.PathLike[str], synchronous: str) -> None:
        """Open (or create) the database with PRAGMA synchronous=`synchronous` (FULL or NORMAL,
        checked by the server's settings); raises DatabaseLocked when another server holds it,
        StorageDamaged when the file is not a tierank database or cannot be read."""
        self.path = Path(path)
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._lock_fd = lock_file(self.path)
        except OSError as error:
            raise StorageError(f"cannot open the database {path}: {file_problem(error)}") from None
        # Left by a server that was killed: whoever holds the lock now has not announced yet.
        address_file(self.path).unlink(missing_ok=True)
        try:
            writer_conn, reader_conn = open_connections(self.path, synchronous)
        except BaseException:
            os.close(self._lock_fd)
            raise
        self._writer = Worker(writer_conn, "tierank-sqlite-writer", transactional=True)
        self._reader = Worker(reader_conn, "tierank-sqlite-reader", transactional=False)
        # The file lock makes this process the database's only server, so leases live in
        # memory: every lease in the file's past belonged to a process that is gone.
        self._leases: dict[str, int] = {}
        self._epochs = itertools.count(1)
        self._cancel_requested: set[str] = set()
        self._watchers: dict[str, str] = {}  # open watch streams: id -> tenant
        self._study_leases: dict[str, tuple[str, float]] = {}
        self._batch_polls: dict[str, tuple[str, float]] = {}
        self._orphans_settled = False

    async def ping(self) -> None:
        await self._reader.submit(lambda conn: conn.execute("SELECT 1").fetchone())

    async def unfinished_counts(self) -> UnfinishedCounts:
        return await self._reader.submit(
            lambda conn: unfinished_counts_from(conn.execute(UNFINISHED_COUNTS).fetchall())
        )

    def announce(self, address: str) -> None:
        # Only a hint for a second command's message: a full disk or a read-only folder must
        # not stop a server that can serve (its jobs pause on writes until space is freed).
        with contextlib.suppress(OSError):
            address_file(self.path).write_text(f"{address} {os.getpid()}\n")

    async def close(self) -> None:
        address_file(self.path).unlink(missing_ok=True)
        await asyncio.to_thread(self._writer.stop)
        await asyncio.to_thread(self._reader.stop)
        # Only now: closing any descriptor of the file drops SQLite's own POSIX locks on it.
        os.close(self._lock_fd)
