"""What keeps revocation of open streams cheap: a recheck reads each key with open streams once,
however many streams it has, and nothing while no stream is open."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from contextlib import ExitStack
from pathlib import Path

import pytest

from tierank.server.errors import Unauthenticated
from tierank.server.rpc.auth import Caller
from tierank.server.rpc.revocation import StreamCredentials
from tierank.server.storage.base import KeyRecord, Storage
from tierank.server.storage.sqlite import SqliteStorage

STREAMS_PER_KEY = 50


class CountingReads:
    """The storage, counting the key reads made through it."""

    def __init__(self, storage: Storage) -> None:
        self._storage = storage
        self.key_reads = 0

    async def get_key(self, key_id: str) -> KeyRecord | None:
        self.key_reads += 1
        return await self._storage.get_key(key_id)


async def events() -> AsyncIterator[str]:
    while True:
        yield "event"


async def test_a_recheck_reads_each_open_key_once_and_ends_only_the_revoked_ones(tmp_path: Path):
    storage = SqliteStorage(tmp_path / "t.db", synchronous="NORMAL")
    try:
        for key_id in ("aaaaaaaaaaaa", "bbbbbbbbbbbb"):
            await storage.create_key(KeyRecord(key_id, "team-a", "member", "", b"", time.time()))
        reads = CountingReads(storage)
        credentials = StreamCredentials(reads)  # type: ignore[arg-type]
        with ExitStack() as open_streams:
            streams = {
                key_id: [
                    open_streams.enter_context(
                        credentials.watching(Caller("team-a", "member", key_id), "WatchJob")
                    )
                    for _ in range(STREAMS_PER_KEY)
                ]
                for key_id in ("aaaaaaaaaaaa", "bbbbbbbbbbbb")
            }
            await credentials.recheck()
            assert reads.key_reads == 2

            await storage.revoke_key("aaaaaaaaaaaa", time.time())
            await credentials.recheck()
            assert reads.key_reads == 4
            for stream in streams["aaaaaaaaaaaa"]:
                with pytest.raises(Unauthenticated) as ended:
                    await stream.next_of(events())
                assert str(ended.value) == "API key keys/aaaaaaaaaaaa was revoked"
            for stream in streams["bbbbbbbbbbbb"]:
                assert await stream.next_of(events()) == "event"

        # Every stream closed: nothing is read any more.
        await credentials.recheck()
        assert reads.key_reads == 4
    finally:
        await storage.close()
