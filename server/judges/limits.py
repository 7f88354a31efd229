"""Rate limits and concurrency caps, shared by every job for the server's lifetime.

Each (provider, model) gets one request limiter and one token limiter (aiolimiter leaky
buckets sized from the settings); each provider gets a cap on calls in flight. A call holds its
slot only while its HTTP request runs, not while it sleeps before a retry.

Several replicas on one database share a provider's request and token rates: each takes an
equal part (`ReplicaShare`, set from the replica membership every beat), so the total never
exceeds the configured limit. The price is precision, never a database round trip per call: a
replica cannot lend the part it does not use to a busy one, and for one beat after a replica
joins, the others still spend their larger parts (a fresh bucket also starts full). The cap on
calls in flight stays per replica: it protects this process as much as the provider.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from aiolimiter import AsyncLimiter

from tierank.server.judges.settings import JudgeSettings


class ReplicaShare:
    """How many replicas split each rate limit (1 for a server on its own)."""

    def __init__(self) -> None:
        self.replicas = 1


class ProviderLimits:
    def __init__(self, settings: JudgeSettings, share: ReplicaShare) -> None:
        self._settings = settings
        self._share = share
        self._sized_for = share.replicas
        self._request_limiters: dict[tuple[str, str], AsyncLimiter | None] = {}
        self._token_limiters: dict[tuple[str, str], AsyncLimiter | None] = {}
        self._in_flight: dict[str, asyncio.Semaphore] = {}

    def _limiters(
        self, provider: str, model: str
    ) -> tuple[AsyncLimiter | None, AsyncLimiter | None]:
        if self._sized_for != self._share.replicas:
            self._sized_for = self._share.replicas
            self._request_limiters.clear()
            self._token_limiters.clear()
        key = (provider, model)
        if key not in self._request_limiters:
            limit = self._settings.rate_limit(provider, model)
            parts = self._sized_for
            self._request_limiters[key] = (
                None if limit is None else _bucket(limit.requests, limit.period_s, parts)
            )
            self._token_limiters[key] = (
                None if limit is None else _bucket(limit.tokens, limit.period_s, parts)
            )
        return self._request_limiters[key], self._token_limiters[key]

    def _semaphore(self, provider: str) -> asyncio.Semaphore:
        if provider not in self._in_flight:
            cap = self._settings.provider(provider).max_concurrency
            self._in_flight[provider] = asyncio.Semaphore(cap)
        return self._in_flight[provider]

    @asynccontextmanager
    async def slot(self, provider: str, model: str, tokens: int) -> AsyncIterator[None]:
        """Waits for the rate limits and a free slot, then holds the slot for the block."""
        requests, token_bucket = self._limiters(provider, model)
        if requests is not None:
            await requests.acquire()
        if token_bucket is not None:
            # A prompt larger than the whole bucket would wait forever: take the whole bucket.
            await token_bucket.acquire(min(tokens, token_bucket.max_rate))
        async with self._semaphore(provider):
            yield


def _bucket(amount: float | None, period_s: float, parts: int) -> AsyncLimiter | None:
    """A leaky bucket for one part of `amount` per `period_s` (None: no limit). A part below
    one request keeps the rate with a bucket of one over a longer period: a request never
    needs more than the bucket holds."""
    if not amount:
        return None
    share = amount / parts
    if share >= 1:
        return AsyncLimiter(share, period_s)
    return AsyncLimiter(1, period_s / share)
