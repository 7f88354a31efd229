"""The verdict cache in PostgreSQL."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tierank.server.storage.base import CacheEntry, VerdictCache
from tierank.server.storage.postgres.connection import PostgresConnection

CACHE_SELECT = (
    "INSERT INTO verdict_cache (key, payload) "
    "SELECT * FROM unnest(%(keys)s::text[], %(cache_payloads)s::bytea[])"
)
CACHE_CONFLICT = "ON CONFLICT (key) DO UPDATE SET payload = excluded.payload"


_CACHE_UPSERT = f"{CACHE_SELECT} {CACHE_CONFLICT}"


class PostgresVerdictCache(PostgresConnection, VerdictCache):
    async def cache_get(self, key: str) -> bytes | None:
        row = await self._fetchone("SELECT payload FROM verdict_cache WHERE key = %s", (key,))
        return bytes(row[0]) if row else None

    async def cache_put(self, entries: Sequence[CacheEntry]) -> None:
        if entries:
            await self._execute(_CACHE_UPSERT, cache_arrays(entries))


def cache_arrays(entries: Sequence[CacheEntry]) -> dict[str, list[Any]]:
    # One INSERT may not update a row twice: of two entries for one key, the last one wins, as
    # it would if they were written one after the other.
    latest = {c.key: c.payload for c in entries}
    return {"keys": list(latest), "cache_payloads": list(latest.values())}
