"""Opens the storage a `--db` value names: a path or `sqlite:///path` (the embedded default),
or `postgresql://user@host:port/db` for several replicas on one database."""

from __future__ import annotations

import os
from dataclasses import dataclass

from tierank.server.storage.base import Storage

SQLITE_SCHEME = "sqlite://"
POSTGRES_SCHEMES = ("postgresql://", "postgres://")


@dataclass(frozen=True)
class PoolSettings:
    """PostgreSQL only: connections per replica and the longest a statement may run."""

    size: int = 10
    statement_timeout_s: float = 30.0


def is_postgres(location: str) -> bool:
    return location.startswith(POSTGRES_SCHEMES)


def sqlite_path(location: str | os.PathLike[str]) -> str:
    """The file of a SQLite location: `sqlite:///abs/path`, `sqlite://rel/path` or a path."""
    text = os.fspath(location)
    return text.removeprefix(SQLITE_SCHEME)


def shown(location: str | os.PathLike[str]) -> str:
    """The location without a password, for logs."""
    text = os.fspath(location)
    if not is_postgres(text):
        return text
    scheme, _, rest = text.partition("://")
    credentials, at, host = rest.rpartition("@")
    if not at:
        return text
    user = credentials.partition(":")[0]
    return f"{scheme}://{user}@{host}"


async def open_storage(
    location: str | os.PathLike[str],
    *,
    sqlite_synchronous: str = "FULL",
    pool: PoolSettings = PoolSettings(),
) -> Storage:
    text = os.fspath(location)
    if is_postgres(text):
        # Imported only here: SQLite users never load the PostgreSQL driver.
        from tierank.server.storage.postgres import PostgresStorage

        return await PostgresStorage.connect(
            text,
            pool_size=pool.size,
            statement_timeout_s=pool.statement_timeout_s,
        )
    from tierank.server.storage.sqlite import SqliteStorage

    return SqliteStorage(sqlite_path(text), sqlite_synchronous)
