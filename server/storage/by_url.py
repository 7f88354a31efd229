"""Opens the storage a `--db` value names: a path or `sqlite:///path` (the embedded default),
or `postgresql://user@host:port/db` for several replicas on one database."""

from __future__ import annotations

import os
from dataclasses import dataclass

from tierank.addresses import MAX_PORT
from tierank.server.storage.base import Storage

SQLITE_SCHEME = "sqlite://"
POSTGRES_SCHEMES = ("postgresql://", "postgres://")


@dataclass(frozen=True)
class PoolSettings:
    """PostgreSQL only: connections per replica and the longest a statement may run (the
    server's settings say how many and how long)."""

    size: int
    statement_timeout_s: float


def is_postgres(location: str) -> bool:
    return location.startswith(POSTGRES_SCHEMES)


def check_location(text: str) -> str:
    """`text` if it can name a database, else ValueError saying what is wrong with it (an
    empty value, a scheme other than sqlite:// and postgresql://, a URL that cannot be read),
    so that a mistyped --db is refused before anything is opened or created."""
    if not text.strip():
        raise ValueError("is empty: give a SQLite file path or a postgresql:// URL")
    scheme, separator, rest = text.partition("://")
    if not separator:
        return text
    if is_postgres(text):
        _check_postgres_url(text)
        return text
    if text.startswith(SQLITE_SCHEME):
        if not rest.strip("/"):
            raise ValueError("names no file: sqlite:///PATH")
        return text
    raise ValueError(
        f"has the unknown scheme {scheme + '://'!r}: give a SQLite file path, sqlite:///PATH, "
        "or postgresql://USER@HOST:PORT/DB"
    )


def _check_postgres_url(text: str) -> None:
    # libpq's own parser (as the connection will read it), loaded only for PostgreSQL URLs.
    import psycopg
    from psycopg.conninfo import conninfo_to_dict

    try:
        parameters = conninfo_to_dict(text)
    except psycopg.Error as error:
        reason = " ".join(str(error).split()).replace(f'"{text}"', "it")
        raise ValueError(f"is not a PostgreSQL URL libpq can read: {reason}") from None
    for port in str(parameters.get("port", "")).split(","):
        if port and not (port.isdigit() and 0 < int(port) <= MAX_PORT):
            raise ValueError(f"has the port {port!r}; a port is a number from 1 to {MAX_PORT}")


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
    sqlite_synchronous: str,
    pool: PoolSettings,
) -> Storage:
    """The storage `location` names: SQLite opened with PRAGMA synchronous=`sqlite_synchronous`
    (FULL or NORMAL), or PostgreSQL with `pool`."""
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
