"""In-memory fan-out of committed job events to watchers.

Storage is the source of truth; the hub only keeps a short window of recent events so that
watchers who are caught up are served from memory. A watcher that falls behind the window
reads the gap from storage, so it misses nothing however slow it is.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager

from tierank.server.errors import resource_exhausted
from tierank.server.names import job_name
from tierank.v1 import rank_pb2

WINDOW = 64
# Each watcher holds a stream, its catch-up page and a flow-control window of memory; past
# this, one client's watchers would grow the server without bound.
MAX_WATCHERS_PER_JOB = 200


class JobChannel:
    def __init__(self) -> None:
        self._recent: deque[rank_pb2.JobEvent] = deque(maxlen=WINDOW)
        self._latest = 0
        self._changed = asyncio.Condition()
        self.watchers = 0

    async def publish(self, events: list[rank_pb2.JobEvent]) -> None:
        async with self._changed:
            self._recent.extend(events)
            self._latest = events[-1].sequence
            self._changed.notify_all()

    def events_after(self, sequence: int) -> list[rank_pb2.JobEvent] | None:
        """Recent events after `sequence`, or None when the window no longer reaches back."""
        if not self._recent or sequence >= self._latest:
            return []
        if self._recent[0].sequence > sequence + 1:
            return None
        return [e for e in self._recent if e.sequence > sequence]

    async def wait_beyond(self, sequence: int) -> None:
        async with self._changed:
            await self._changed.wait_for(lambda: self._latest > sequence)


class EventHub:
    def __init__(self) -> None:
        self._channels: dict[str, JobChannel] = {}

    async def publish(self, job_id: str, events: list[rank_pb2.JobEvent]) -> None:
        # A job nobody watches keeps no window: a watcher who arrives later reads storage.
        channel = self._channels.get(job_id)
        if channel is not None and events:
            await channel.publish(events)

    @contextmanager
    def watching(self, job_id: str) -> Iterator[JobChannel]:
        channel = self._channels.setdefault(job_id, JobChannel())
        if channel.watchers >= MAX_WATCHERS_PER_JOB:
            raise resource_exhausted(
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
