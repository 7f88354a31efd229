"""A job's events after a sequence number, in order, once each, until the terminal one.

Storage is the source of truth; the hub serves watchers who are caught up from memory.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable, Iterator

from tierank.resources import FINAL_JOB_STATES, is_terminal_event
from tierank.server.jobs.hub import EventHub
from tierank.server.storage.base import EventRow, JobReader
from tierank.v1 import rank_pb2

# A watcher reading the past holds at most one page of events, and a watcher that stops reading
# stalls holding it: pages are cut to _PAGE_BYTES (or one event, when one alone is larger). A
# tiers event of a 10,000-candidate job is over 1 MB, and 200 stalled watchers each holding a
# 500-event page of them would hold the server's memory hostage.
_MAX_PAGE_EVENTS = 500
_PAGE_BYTES = 256 * 1024


async def follow_events(
    storage: JobReader, hub: EventHub, tenant: str, job_id: str, after: int
) -> AsyncIterator[rank_pb2.JobEvent]:
    """Every event after `after` of the tenant's job, in order, once each, until the
    terminal one."""
    with hub.watching(job_id) as channel:
        last = after
        caught_up = False
        checked_finished = False
        while True:
            recent = channel.events_after(last) if caught_up else None
            if recent is None:
                rows = await storage.read_events(
                    tenant, job_id, last, _MAX_PAGE_EVENTS, _PAGE_BYTES
                )
                # Caught up once storage has nothing more: events published from then on are in
                # the channel's window (it was subscribed before the first read).
                caught_up = not rows
                events: Iterable[rank_pb2.JobEvent] = _decoded(rows)
            else:
                events = recent
            moved = False
            for event in events:
                moved = True
                last = event.sequence
                yield event
                if is_terminal_event(event):
                    return
            if moved:
                continue
            if not checked_finished:
                # Asked to start at or past the end of a finished job: nothing will come.
                # Once subscribed, a job that is still open publishes its end to us.
                checked_finished = True
                record = await storage.get_job(tenant, job_id)
                if record is not None and record.state in FINAL_JOB_STATES:
                    if record.last_sequence <= last:
                        return
                    # It finished between our read and this check: its last events are stored.
                    caught_up = False
                    continue
            # False after a poll interval or a resync: then storage is read again.
            caught_up = await channel.wait_beyond(last, hub.poll_s)


def _decoded(rows: list[EventRow]) -> Iterator[rank_pb2.JobEvent]:
    """The rows' events, decoded one at a time, each row let go once decoded: a stalled
    watcher holds one event (decoded, and serialized in gRPC's send), not its stored bytes too."""
    rows.reverse()
    while rows:
        yield rank_pb2.JobEvent.FromString(rows.pop().payload)
