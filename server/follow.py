"""A job's events after a sequence number, in order, once each, until the terminal one.

Storage is the source of truth; the hub serves watchers who are caught up from memory.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

from tierank.server.hub import EventHub
from tierank.server.storage.base import Storage
from tierank.server.views import TERMINAL_STATES, is_terminal
from tierank.v1 import rank_pb2

_CATCH_UP_PAGE = 500


async def follow_events(
    storage: Storage, hub: EventHub, job_id: str, after: int
) -> AsyncIterator[rank_pb2.JobEvent]:
    """Every event after `after`, in order, once each, until the terminal one."""
    with hub.watching(job_id) as channel:
        last = after
        caught_up = False
        checked_finished = False
        while True:
            events = None if not caught_up else channel.events_after(last)
            if events is None:
                rows = await storage.read_events(job_id, last, _CATCH_UP_PAGE)
                events = [rank_pb2.JobEvent.FromString(r.payload) for r in rows]
                caught_up = len(rows) < _CATCH_UP_PAGE
            for event in events:
                yield event
                if is_terminal(event):
                    return
            if events:
                last = events[-1].sequence
                continue
            if not checked_finished:
                # Asked to start at or past the end of a finished job: nothing will come.
                # Once subscribed, a job that is still open publishes its end to us.
                checked_finished = True
                record = await storage.get_job(job_id)
                if record is not None and record.state in TERMINAL_STATES:
                    return
            await channel.wait_beyond(last)
