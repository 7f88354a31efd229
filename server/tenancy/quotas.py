"""A tenant's limits as the server enforces them outside storage's transactions."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager

from tierank.server.storage.base import Limits, QuotaExceeded, Storage


async def limits_of(storage: Storage, tenant: str) -> Limits:
    """The tenant's limits; a tenant nobody has configured has none."""
    record = await storage.get_tenant(tenant)
    return record.limits if record is not None else Limits()


def check_candidates(limits: Limits, candidates: int) -> None:
    if limits.max_candidates is not None and candidates > limits.max_candidates:
        raise QuotaExceeded("max_candidates", limits.max_candidates)


class WatcherSlots:
    """Open WatchJob and Rank streams per tenant, on this server."""

    def __init__(self) -> None:
        self._open: Counter[str] = Counter()

    @contextmanager
    def hold(self, tenant: str, limits: Limits) -> Iterator[None]:
        if limits.max_watchers is not None and self._open[tenant] >= limits.max_watchers:
            raise QuotaExceeded("max_watchers", limits.max_watchers)
        self._open[tenant] += 1
        try:
            yield
        finally:
            self._open[tenant] -= 1
            if not self._open[tenant]:
                del self._open[tenant]
