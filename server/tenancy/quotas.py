"""A tenant's limits as the server enforces them outside storage's transactions."""

from __future__ import annotations

import secrets
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager

import anyio

from tierank.limits import MAX_EVAL_REQUESTS_PER_TENANT
from tierank.server.errors import QuotaExceeded, ResourceExhausted
from tierank.server.storage.base import Limits, TenantStore, WatcherStore


async def limits_of(storage: TenantStore, tenant: str) -> Limits:
    """The tenant's limits; a tenant nobody has configured has none."""
    record = await storage.get_tenant(tenant)
    return record.limits if record is not None else Limits()


def check_candidates(limits: Limits, candidates: int) -> None:
    if limits.max_candidates is not None and candidates > limits.max_candidates:
        raise QuotaExceeded("max_candidates", limits.max_candidates)


class WatcherSlots:
    """Open WatchJob and Rank streams per tenant, counted in storage so that max_watchers
    holds across replicas. Tenants without the limit cost nothing."""

    def __init__(self, storage: WatcherStore, replica: str) -> None:
        self._storage = storage
        self._replica = replica

    @asynccontextmanager
    async def hold(self, tenant: str, limits: Limits) -> AsyncIterator[None]:
        if limits.max_watchers is None:
            yield
            return
        watch_id = secrets.token_hex(8)
        await self._storage.hold_watcher(watch_id, self._replica, tenant, limits.max_watchers)
        try:
            yield
        finally:
            # A stream cancelled by its client still gives its slot back.
            with anyio.CancelScope(shield=True):
                await self._storage.release_watcher(watch_id)


class EvalSlots:
    """Heavy EvalService requests running per tenant on this server. One past the limit is
    refused at once (RESOURCE_EXHAUSTED) rather than queued: a queued request would hold its
    (up to 100,000 pairs of) input while its caller's deadline runs."""

    def __init__(self, per_tenant: int = MAX_EVAL_REQUESTS_PER_TENANT) -> None:
        self._per_tenant = per_tenant
        self._running: Counter[str] = Counter()

    @contextmanager
    def hold(self, tenant: str) -> Iterator[None]:
        if self._running[tenant] >= self._per_tenant:
            raise ResourceExhausted(
                f"tenant {tenant} already runs {self._per_tenant} grading or scoring requests "
                "on this server, its limit; send this one when one of them has finished",
                "EVAL_REQUESTS_EXHAUSTED",
                limit=str(self._per_tenant),
            )
        self._running[tenant] += 1
        try:
            yield
        finally:
            self._running[tenant] -= 1
