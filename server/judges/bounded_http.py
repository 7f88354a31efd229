"""A byte cap on every HTTP answer the provider SDKs read, enforced while the body arrives.

The SDKs read a whole body into memory before we see any of it, so cutting the answer's text
(llm.MAX_ANSWER_CHARS) bounds what is stored but not what a runaway answer costs in memory.
A response hook wraps each response's stream before the SDK reads it: the read stops with
ResponseTooLarge once more than MAX_RESPONSE_BYTES have arrived, or at once when the declared
Content-Length is larger. A hook, rather than our own transport, leaves each SDK's connection
pool, timeouts, socket options and proxy settings as the SDK builds them.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar

import httpx2

from tierank.server.judges.base import FailureKind
from tierank.server.judges.retry import CallError

# Far above any real answer (a ranking is a few KiB, an error body rarely 100 KiB), far below
# what would strain the server's memory with several calls in flight.
MAX_RESPONSE_BYTES = 1024 * 1024
# The cap of the answers read in this context: MAX_RESPONSE_BYTES, unless response_cap says
# otherwise (the event hooks run in the task that sends the request).
_CAP: ContextVar[int] = ContextVar("response_cap", default=MAX_RESPONSE_BYTES)


@contextmanager
def response_cap(max_bytes: int) -> Iterator[None]:
    """Caps the answers read inside at `max_bytes` instead: a provider batch's results hold
    one answer per call, each of which may take up to MAX_RESPONSE_BYTES."""
    token = _CAP.set(max_bytes)
    try:
        yield
    finally:
        _CAP.reset(token)


class ResponseTooLarge(Exception):
    """A provider's HTTP answer is larger than MAX_RESPONSE_BYTES."""

    def __init__(self, size: str, cap: int = MAX_RESPONSE_BYTES) -> None:
        super().__init__(
            f"the provider's HTTP answer ({size}) exceeds the cap of {cap} bytes and was not read"
        )

    def failure(self) -> CallError:
        """Truncated, which is neither retried (the same answer would come again) nor heard
        by the breaker (the provider is not down)."""
        return CallError(FailureKind.TRUNCATED, str(self))


class _BoundedStream(httpx2.AsyncByteStream):
    def __init__(self, stream: httpx2.AsyncByteStream, cap: int) -> None:
        self._stream = stream
        self._cap = cap

    async def __aiter__(self) -> AsyncIterator[bytes]:
        read = 0
        async for chunk in self._stream:
            read += len(chunk)
            if read > self._cap:
                raise ResponseTooLarge(f"{read} bytes and more", self._cap)
            yield chunk

    async def aclose(self) -> None:
        await self._stream.aclose()


async def _bound_response(response: httpx2.Response) -> None:
    cap = _CAP.get()
    declared = response.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > cap:
        raise ResponseTooLarge(f"Content-Length {declared}", cap)
    assert isinstance(response.stream, httpx2.AsyncByteStream)
    response.stream = _BoundedStream(response.stream, cap)


def bounded_event_hooks() -> dict[str, list[Callable[[httpx2.Response], Awaitable[None]]]]:
    """The `event_hooks` argument for an httpx2.AsyncClient whose answers are capped."""
    return {"response": [_bound_response]}
