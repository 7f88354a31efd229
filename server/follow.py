"""A job's events after a sequence number, in order, once each, until the terminal one.

Storage is the source of truth; the hub serves watchers who are caught up from memory.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable

from tierank.server.hub import EventHub
from tierank.server.storage.base import Storage
from tierank.server.views import TERMINAL_STATES, is_terminal
from tierank.v1 import rank_pb2

# A watcher reading the past holds one page of events in memory. Pages are cut by size, not only
# by count: a tiers event of a 10,000-candidate job is over 1 MB, and 200 watchers each holding
# 500 of them would hold the server's memory hostage.
_MAX_PAGE_EVENTS = 500
_PAGE_BYTES = 256 * 1024


async def follow_events(
    storage: Storage, hub: EventHub, job_id: str, after: int
) -> AsyncIterator[rank_pb2.JobEvent]:
    """Every event after `after`, in order, once each, until the terminal one."""
    with hub.watching(job_id) as channel:
        last = after
        caught_up = False
        checked_finished = False
        # Grows after the first read to as many events as fit in _PAGE_BYTES.
        page = 1
        while True:
            recent = channel.events_after(last) if caught_up else None
            if recent is None:
                rows = await storage.read_events(job_id, last, page)
                caught_up = len(rows) < page
                largest = max((len(r.payload) for r in rows), default=1)
                page = max(1, min(_MAX_PAGE_EVENTS, _PAGE_BYTES // largest))
                # Decoded one at a time: a stalled watcher holds one decoded event, not a page.
                events: Iterable[rank_pb2.JobEvent] = (
                    rank_pb2.JobEvent.FromString(r.payload) for r in rows
                )
            else:
                events = recent
            moved = False
            for event in events:
                moved = True
                last = event.sequence
                yield event
                if is_terminal(event):
                    return
            if moved:
                continue
            if not checked_finished:
                # Asked to start at or past the end of a finished job: nothing will come.
                # Once subscribed, a job that is still open publishes its end to us.
                checked_finished = True
                record = await storage.get_job(job_id)
                if record is not None and record.state in TERMINAL_STATES:
                    return
            await channel.wait_beyond(last)
