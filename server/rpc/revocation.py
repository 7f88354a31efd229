"""Open streams end with UNAUTHENTICATED soon after their key is revoked, on every replica.

A revoke takes effect on a key's next call, since every call reads its key; but a stream is one
call that can last as long as its job, hours. So each server re-reads, every RECHECK_S, the keys
that have streams open on it: one read per key, however many streams and events it has, and
none while no stream is open. Reading storage (not a notification) is what makes a revoke made
through any replica reach the streams of every other one within that interval.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from typing import TypeVar

import anyio
import structlog

from tierank.server.errors import StorageError
from tierank.server.rpc import audit
from tierank.server.rpc.auth import Caller, key_revoked
from tierank.server.storage.base import KeyStore

# "Within a few seconds" of a revoke, at the cost of one indexed read per open key this often.
RECHECK_S = 2.0

_T = TypeVar("_T")


class WatchedStream:
    """One open stream of a key: its next response is awaited in a cancel scope that a revoke
    cancels, so a stream waiting for its job's next event ends at once."""

    def __init__(self, caller: Caller, rpc: str) -> None:
        self._caller = caller
        self._rpc = rpc
        self._revoked = False
        self._waiting: anyio.CancelScope | None = None

    def revoke(self) -> None:
        self._revoked = True
        if self._waiting is not None:
            self._waiting.cancel()

    async def next_of(self, responses: AsyncIterator[_T]) -> _T:
        """The stream's next response, or KEY_REVOKED once its key is revoked."""
        if not self._revoked:
            with anyio.CancelScope() as self._waiting:
                try:
                    return await anext(responses)
                finally:
                    self._waiting = None
        audit.denied(self._caller, self._rpc, "revoked API key: open stream ended")
        raise key_revoked(self._caller.key_id)


class StreamCredentials:
    """The open streams of each key, and the loop that ends them when their key is revoked."""

    def __init__(self, storage: KeyStore, recheck_s: float = RECHECK_S) -> None:
        self._storage = storage
        self._recheck_s = recheck_s
        self._streams: dict[str, set[WatchedStream]] = {}

    @contextmanager
    def watching(self, caller: Caller, rpc: str) -> Iterator[WatchedStream]:
        stream = WatchedStream(caller, rpc)
        streams = self._streams.setdefault(caller.key_id, set())
        streams.add(stream)
        try:
            yield stream
        finally:
            streams.discard(stream)
            if not streams:
                del self._streams[caller.key_id]

    async def run(self) -> None:
        """Re-read the keys of open streams every RECHECK_S, until cancelled."""
        while True:
            await anyio.sleep(self._recheck_s)
            await self.recheck()

    async def recheck(self) -> None:
        for key_id in list(self._streams):
            try:
                key = await self._storage.get_key(key_id)
            except StorageError as error:
                # A database blip must not end every stream: the next round reads again.
                structlog.get_logger().warning(
                    "cannot recheck the key of open streams", key=key_id, error=str(error)
                )
                continue
            if key is None or key.revoke_time is not None:
                for stream in list(self._streams.get(key_id, ())):
                    stream.revoke()
