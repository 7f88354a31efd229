"""PostgreSQL storage, for several server replicas on one database.

Why psycopg 3 with psycopg_pool: the pool replaces broken connections in the background, so
the storage recovers without a restart when the database comes back; lists travel as arrays,
so a commit of any size is one statement (one round trip, a plan prepared once); pipeline mode
lets the statements of a transaction travel together; and it is built on libpq, so every
connection option and PG* environment variable operators know works in `--db`.

Semantics are SQLite's (server/storage/sqlite/), with what several processes need on top:
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
leaves this package as a StorageError in plain words, never a driver's class name.

One module per role (jobs, leases, tenants, keys, spend, qualifications, cache, operations),
each a part of PostgresStorage sharing the pool (connection.py); the schema's migrations in
migrations.py.
"""

from tierank.server.storage.postgres.connection import migrate, migration_status
from tierank.server.storage.postgres.storage import PostgresStorage

__all__ = ["PostgresStorage", "migrate", "migration_status"]
