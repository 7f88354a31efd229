"""PostgresStorage: every role of storage on one PostgreSQL schema (see the package's
docstring).
"""

from __future__ import annotations

import psycopg
from psycopg_pool import AsyncConnectionPool

from tierank.server.storage.base import Storage, UnfinishedCounts
from tierank.server.storage.postgres.batches import PostgresProviderBatches
from tierank.server.storage.postgres.cache import PostgresVerdictCache
from tierank.server.storage.postgres.connection import (
    CONNECTION_OPTIONS,
    configure_session,
    migrate,
    plain_error,
)
from tierank.server.storage.postgres.jobs import PostgresJobs
from tierank.server.storage.postgres.keys import PostgresKeys
from tierank.server.storage.postgres.leases import PostgresLeases, PostgresWatchers
from tierank.server.storage.postgres.operations import PostgresOperations
from tierank.server.storage.postgres.qualifications import PostgresQualifications
from tierank.server.storage.postgres.spend import PostgresSpend
from tierank.server.storage.postgres.studies import PostgresStudies
from tierank.server.storage.postgres.tenants import PostgresTenants
from tierank.server.storage.rules import UNFINISHED_COUNTS, unfinished_counts_from

# How long a caller waits for a pooled connection when statements have no timeout.
_DEFAULT_CONNECTION_WAIT_S = 30.0


class PostgresStorage(
    PostgresJobs,
    PostgresLeases,
    PostgresWatchers,
    PostgresTenants,
    PostgresKeys,
    PostgresSpend,
    PostgresQualifications,
    PostgresVerdictCache,
    PostgresOperations,
    PostgresStudies,
    PostgresProviderBatches,
    Storage,
):
    """Open one with `PostgresStorage.connect`."""

    shared = True

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
            await configure_session(conn, schema, statement_timeout_s)

        wait_s = statement_timeout_s or _DEFAULT_CONNECTION_WAIT_S
        pool: AsyncConnectionPool = AsyncConnectionPool(
            url,
            min_size=pool_size,
            max_size=pool_size,
            kwargs=CONNECTION_OPTIONS,
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
            raise plain_error(error) from error
        return cls(pool, url, f"tierank:{current}")

    def announce(self, address: str) -> None:
        """Nothing to say: every replica is welcome on a shared database, none is refused."""

    async def ping(self) -> None:
        await self._fetchone("SELECT 1", None)

    async def unfinished_counts(self) -> UnfinishedCounts:
        return unfinished_counts_from(await self._fetchall(UNFINISHED_COUNTS))

    async def close(self) -> None:
        await self._pool.close()
