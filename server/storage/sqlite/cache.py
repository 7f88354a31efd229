"""The verdict cache in SQLite."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence

from tierank.server.storage.base import CacheEntry, VerdictCache
from tierank.server.storage.sqlite.connection import SqliteState


class SqliteVerdictCache(SqliteState, VerdictCache):
    async def cache_get(self, key: str) -> bytes | None:
        def read(conn: sqlite3.Connection) -> bytes | None:
            row = conn.execute("SELECT payload FROM verdict_cache WHERE key = ?", (key,)).fetchone()
            return row[0] if row else None

        return await self._reader.submit(read)

    async def cache_put(self, entries: Sequence[CacheEntry]) -> None:
        await self._writer.submit(lambda conn: put_cache(conn, entries))


def put_cache(conn: sqlite3.Connection, entries: Sequence[CacheEntry]) -> None:
    conn.executemany(
        "INSERT OR REPLACE INTO verdict_cache (key, payload) VALUES (?, ?)",
        [(c.key, c.payload) for c in entries],
    )
