"""PostgreSQL connections: the pool every role of PostgresStorage shares, sessions outside it,
and driver errors in plain words.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

import psycopg
from psycopg import sql
from psycopg_pool import AsyncConnectionPool

from tierank.server.errors import StorageDamaged, StorageError, StorageFull, StorageUnavailable
from tierank.server.storage.postgres.migrations import apply_migrations, migration_states

# Driver messages can quote a damaged row's bytes; a client is told the gist only.
_MAX_DETAIL = 200
_DAMAGED_STATES = frozenset({"XX001", "XX002"})  # data_corrupted, index_corrupted
# The server is shutting down, restarting, or not accepting connections yet.
_GONE_STATES = frozenset({"57P01", "57P02", "57P03"})
# The database's clock, in seconds: every replica measures leases by the same clock.
NOW = "extract(epoch FROM clock_timestamp())::float8"
# Advisory locks of the (int, int) form: a class per kind of quota, the tenant's hash second.
# One tenant's job creations, spend reservations and watch slots then never wait on each other.
JOB_QUOTA_LOCK = 0x74720001
SPEND_LOCK = 0x74720002
WATCH_LOCK = 0x74720003
# A replica's row while its last heartbeat's time to live lasts.
LIVE = f"alive_until >= {NOW}"


def plain_error(error: psycopg.Error) -> StorageError:
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


def text(stored: bytes) -> str:
    """Free text kept as UTF-8 bytes (see migrations.py: TEXT cannot hold NUL)."""
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


async def configure_session(
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
CONNECTION_OPTIONS: dict[str, Any] = {"autocommit": True, "fallback_application_name": "tierank"}


@contextlib.asynccontextmanager
async def _session(url: str, schema: str | None) -> AsyncIterator[psycopg.AsyncConnection]:
    """One connection outside any pool, without a statement timeout (see migrations.py)."""
    try:
        conn = await psycopg.AsyncConnection.connect(url, **CONNECTION_OPTIONS)
    except psycopg.Error as error:
        raise plain_error(error) from error
    try:
        await configure_session(conn, schema, 0)
        yield conn
    except psycopg.Error as error:
        raise plain_error(error) from error
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


class PostgresConnection:
    """What the roles of PostgresStorage share: the pool, and the schema's notification
    channel."""

    def __init__(self, pool: AsyncConnectionPool, url: str, channel: str) -> None:
        self._pool = pool
        self._url = url
        # Notifications reach every session of the database: the channel is the schema's, so
        # that servers on other schemas of one database never wake each other.
        self._channel = channel

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
            raise plain_error(error) from error

    async def _fetchone(self, query: Any, params: Any) -> Any:
        try:
            async with self._connection() as conn:
                cursor = await conn.execute(query, params, binary=True)
                return await cursor.fetchone()
        except psycopg.Error as error:
            raise plain_error(error) from error

    async def _execute(self, query: Any, params: Any) -> None:
        """One statement, hence one transaction and one round trip."""
        try:
            async with self._connection() as conn:
                await conn.execute(query, params)
        except psycopg.Error as error:
            raise plain_error(error) from error

    async def _fetchall(self, query: Any, params: Any = None) -> list[Any]:
        try:
            async with self._connection() as conn:
                cursor = await conn.execute(query, params, binary=True)
                return await cursor.fetchall()
        except psycopg.Error as error:
            raise plain_error(error) from error
