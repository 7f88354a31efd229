"""In-memory fan-out of committed job events to watchers.

Storage is the source of truth; the hub only keeps a short window of recent events so that
watchers who are caught up are served from memory. A watcher that falls behind the window
reads the gap from storage, so it misses nothing however slow it is.

A job run by another replica publishes nothing here: its commits arrive as wake-ups
(`notify`, from the database's notifications) that send its watchers to storage. Where other
replicas share the database, a watcher also looks at storage every `poll_s` seconds, so a lost
notification costs a moment, never an event.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager

import anyio

from tierank.limits import MAX_WATCHERS_PER_JOB
from tierank.server.errors import ResourceExhausted
from tierank.server.names import job_name
from tierank.v1 import rank_pb2

WINDOW = 64


class JobChannel:
    def __init__(self) -> None:
        self._recent: deque[rank_pb2.JobEvent] = deque(maxlen=WINDOW)
        self._latest = 0
        self._resyncs = 0
        self._changed = asyncio.Condition()
        self.watchers = 0

    async def publish(self, events: list[rank_pb2.JobEvent]) -> None:
        async with self._changed:
            self._recent.extend(events)
            self._latest = events[-1].sequence
            self._changed.notify_all()

    async def notify(self, sequence: int) -> None:
        """Events up to `sequence` are stored (by another replica): wake the watchers."""
        async with self._changed:
            if sequence > self._latest:
                self._latest = sequence
                self._changed.notify_all()

    def events_after(self, sequence: int) -> list[rank_pb2.JobEvent] | None:
        """Recent events after `sequence`, or None when the window does not hold them all
        (they were stored elsewhere, or the window no longer reaches back)."""
        if sequence >= self._latest:
            return []
        if not self._recent or self._recent[0].sequence > sequence + 1:
            return None
        if self._recent[-1].sequence < self._latest:
            return None
        return [e for e in self._recent if e.sequence > sequence]

    async def resync(self) -> None:
        async with self._changed:
            self._resyncs += 1
            self._changed.notify_all()

    async def wait_beyond(self, sequence: int, poll_s: float | None) -> bool:
        """Wait until events past `sequence` are known (True), or until storage should be read
        anyway (False): after `poll_s` seconds (None: never), or a resync."""
        resyncs = self._resyncs
        with anyio.move_on_after(poll_s):
            async with self._changed:
                await self._changed.wait_for(
                    lambda: self._latest > sequence or self._resyncs != resyncs
                )
        return self._latest > sequence


class EventHub:
    def __init__(self, poll_s: float | None = None) -> None:
        """`poll_s`: how often a waiting watcher looks at storage anyway; None where this
        process is the only writer (every commit is then published here)."""
        self._channels: dict[str, JobChannel] = {}
        self.poll_s = poll_s

    async def notify(self, job_id: str, sequence: int) -> None:
        channel = self._channels.get(job_id)
        if channel is not None:
            await channel.notify(sequence)

    async def resync(self) -> None:
        """Notifications may have been missed: every watcher looks at storage again."""
        for channel in list(self._channels.values()):
            await channel.resync()

    async def publish(self, job_id: str, events: list[rank_pb2.JobEvent]) -> None:
        # A job nobody watches keeps no window: a watcher who arrives later reads storage.
        channel = self._channels.get(job_id)
        if channel is not None and events:
            await channel.publish(events)

    @contextmanager
    def watching(self, job_id: str) -> Iterator[JobChannel]:
        channel = self._channels.setdefault(job_id, JobChannel())
        if channel.watchers >= MAX_WATCHERS_PER_JOB:
            raise ResourceExhausted(
                f"{job_name(job_id)} has {channel.watchers} watchers already, the most this server "
                "allows per job; close a watch stream or try again later",
                "TOO_MANY_WATCHERS",
                limit=str(MAX_WATCHERS_PER_JOB),
            )
        channel.watchers += 1
        try:
            yield channel
        finally:
            channel.watchers -= 1
            if channel.watchers == 0 and self._channels.get(job_id) is channel:
                del self._channels[job_id]
