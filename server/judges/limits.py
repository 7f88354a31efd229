"""Rate limits and concurrency caps, shared by every job for the server's lifetime.

Each (provider, model) gets one request limiter and one token limiter (aiolimiter leaky
buckets sized from the settings); each provider gets a cap on calls in flight. A call holds its
slot only while its HTTP request runs, not while it sleeps before a retry.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from aiolimiter import AsyncLimiter

from tierank.server.judges.settings import JudgeSettings


class ProviderLimits:
    def __init__(self, settings: JudgeSettings) -> None:
        self._settings = settings
        self._request_limiters: dict[tuple[str, str], AsyncLimiter | None] = {}
        self._token_limiters: dict[tuple[str, str], AsyncLimiter | None] = {}
        self._in_flight: dict[str, asyncio.Semaphore] = {}

    def _limiters(
        self, provider: str, model: str
    ) -> tuple[AsyncLimiter | None, AsyncLimiter | None]:
        key = (provider, model)
        if key not in self._request_limiters:
            limit = self._settings.rate_limit(provider, model)
            requests = limit and limit.requests
            tokens = limit and limit.tokens
            self._request_limiters[key] = (
                AsyncLimiter(requests, limit.period_s) if requests else None
            )
            self._token_limiters[key] = AsyncLimiter(tokens, limit.period_s) if tokens else None
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
