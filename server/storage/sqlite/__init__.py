"""SQLite storage: WAL, one writer thread that group-commits, one reader thread.

Why a dedicated writer: SQLite allows one writer at a time, and a commit's fsync is the
expensive part. Queuing writes to one thread lets every commit carry all the writes that
arrived meanwhile (group commit), while each caller still resumes only after its own write is
durable. Each write runs in its own savepoint, so one failing write never undoes another.

Every SQLite error leaves this package as a StorageError in plain words: StorageFull when the
disk is full (writes fail, reads go on), StorageDamaged when stored data cannot be read back.

One module per role (jobs, leases, tenants, keys, spend, qualifications, cache, operations),
each a part of SqliteStorage sharing the connection's workers (connection.py); the schema and
its migrations in migrations.py.
"""

from tierank.server.storage.sqlite.connection import DatabaseLocked
from tierank.server.storage.sqlite.storage import SqliteStorage

__all__ = ["DatabaseLocked", "SqliteStorage"]
