"""Leases: which replica runs which job. The contract on both backends first (SQLite's leases
live in the one process its file lock admits), then what several replicas on one PostgreSQL
database must get right: disjoint claims, expiry, fencing, membership and notifications."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from functools import partial

import anyio
import pytest

from tierank.server.errors import LeaseLost, QuotaExceeded
from tierank.server.settings import ServerSettings
from tierank.server.storage.base import (
    CANCEL,
    EVENTS,
    FREED,
    RESYNC,
    Change,
    EventRow,
    JobRecord,
    JobUpdate,
    JournalRow,
    Storage,
)
from tierank.server.storage.postgres import PostgresStorage
from tierank.v1 import rank_pb2

PENDING = rank_pb2.JOB_STATE_PENDING
SUCCEEDED = rank_pb2.JOB_STATE_SUCCEEDED
LEASE_S = 30.0
# A replica whose statements may run as long as a server's do by default.
connect = partial(
    PostgresStorage.connect, statement_timeout_s=ServerSettings().db_statement_timeout_s
)


def _job(job_id: str, tenant: str = "acme", state: int = PENDING) -> JobRecord:
    return JobRecord(job_id, tenant, "", state, b"spec", "q", 3, 1000.0, 1000.0)


def _event(sequence: int) -> EventRow:
    return EventRow(sequence, "verdict", 1000.0 + sequence, f"event {sequence}".encode())


async def _jobs(storage: Storage, *job_ids: str, state: int = PENDING) -> None:
    for job_id in job_ids:
        await storage.create_job(_job(job_id, state=state), EventRow(1, "accepted", 1.0, b"a"))


async def test_claims_take_free_unfinished_jobs_oldest_first(storage: Storage):
    await _jobs(storage, "j3", "j1", "j2")
    await _jobs(storage, "j0", state=SUCCEEDED)
    first = await storage.claim_jobs("r1", LEASE_S, 2)
    assert [c.job.job_id for c in first] == ["j1", "j2"]
    assert all(c.lease.owner == "r1" and not c.cancel_requested for c in first)
    # Held jobs are not claimed again, by anyone; a finished one never is.
    assert [c.job.job_id for c in await storage.claim_jobs("r1", LEASE_S, 5)] == ["j3"]
    assert await storage.claim_jobs("r2", LEASE_S, 5) == []
    assert await storage.claim_job("j1", "r2", LEASE_S) is None
    assert await storage.claim_job("j0", "r2", LEASE_S) is None
    assert await storage.claim_jobs("r1", LEASE_S, 0) == []


async def test_a_released_job_is_claimed_with_a_new_epoch_and_the_old_lease_is_fenced(
    storage: Storage,
):
    await _jobs(storage, "j1")
    old = (await storage.claim_jobs("r1", LEASE_S, 1))[0].lease
    await storage.commit("j1", JobUpdate(events=[_event(2)]), old)
    await storage.release_lease(old)
    new = await storage.claim_job("j1", "r2", LEASE_S)
    assert new is not None and new.lease.epoch > old.epoch and new.job.last_sequence == 2

    late = JobUpdate(events=[_event(3)], journal=[JournalRow(0, "plan", b"late")], state=SUCCEEDED)
    with pytest.raises(LeaseLost):
        await storage.commit("j1", late, old)
    job = await storage.get_job("acme", "j1")
    assert (job.state, job.last_sequence) == (PENDING, 2)
    assert await storage.read_journal("j1") == []
    assert await storage.renew_leases([old], LEASE_S) == {}
    # Releasing with the old lease does not free the job from its new holder.
    await storage.release_lease(old)
    assert await storage.claim_job("j1", "r3", LEASE_S) is None
    await storage.commit("j1", JobUpdate(events=[_event(3)], state=SUCCEEDED), new.lease)
    assert (await storage.get_job("acme", "j1")).state == SUCCEEDED


async def test_a_cancel_request_reaches_the_holder_and_the_next_claim(storage: Storage):
    await _jobs(storage, "j1", "j2")
    await _jobs(storage, "done", state=SUCCEEDED)
    held = (await storage.claim_job("j1", "r1", LEASE_S)).lease
    assert await storage.renew_leases([held], LEASE_S) == {"j1": False}
    assert await storage.request_cancel("acme", "j1")
    assert await storage.renew_leases([held], LEASE_S) == {"j1": True}
    assert await storage.request_cancel("acme", "j2")
    claim = await storage.claim_job("j2", "r2", LEASE_S)
    assert claim is not None and claim.cancel_requested
    # Not another tenant's job, not a finished one, not a missing one.
    assert not await storage.request_cancel("globex", "j1")
    assert not await storage.request_cancel("acme", "done")
    assert not await storage.request_cancel("acme", "nope")
    # A finished job's lease stays held until it is released.
    await storage.commit("j1", JobUpdate(state=SUCCEEDED), held)
    assert set(await storage.renew_leases([held], LEASE_S)) == {"j1"}


async def test_the_heartbeat_counts_unfinished_jobs_and_a_draining_replica_takes_no_share(
    storage: Storage,
):
    await _jobs(storage, "j1", "j2")
    await _jobs(storage, "j3", state=SUCCEEDED)
    membership = await storage.heartbeat("r1", LEASE_S)
    assert (membership.live_replicas, membership.unfinished_jobs) == (1, 2)
    assert (await storage.heartbeat("r1", LEASE_S, draining=True)).live_replicas == 0
    await storage.leave("r1")


# -- several replicas on one PostgreSQL database ----------------------------------------------


@pytest.fixture
async def replicas(postgres_url: str, pg_schema: str) -> AsyncIterator[list[PostgresStorage]]:
    opened = [await connect(postgres_url, pool_size=3, schema=pg_schema) for _ in range(3)]
    yield opened
    for storage in opened:
        await storage.close()


async def test_replicas_claiming_at_once_never_claim_a_job_twice(replicas):
    await _jobs(replicas[0], *(f"j{i:02}" for i in range(30)))
    claims = await asyncio.gather(
        *(replicas[i % 3].claim_jobs(f"r{i}", LEASE_S, 4) for i in range(12))
    )
    claimed = [c.job.job_id for batch in claims for c in batch]
    assert sorted(claimed) == [f"j{i:02}" for i in range(30)]
    assert sum(1 for batch in claims if batch) >= 8  # skipped past each other, none queued


async def test_an_expired_lease_is_taken_over_and_the_late_writer_is_fenced(replicas):
    a, b, _ = replicas
    await _jobs(a, "j1")
    paused = (await a.claim_job("j1", "a", 0.5)).lease
    assert await b.claim_job("j1", "b", LEASE_S) is None  # not expired yet
    await anyio.sleep(0.7)
    taken = await b.claim_job("j1", "b", LEASE_S)
    assert taken is not None and taken.lease.epoch == paused.epoch + 1
    with pytest.raises(LeaseLost):
        await a.commit("j1", JobUpdate(events=[_event(2)]), paused)
    assert await a.renew_leases([paused], LEASE_S) == {}
    await b.commit("j1", JobUpdate(events=[_event(2)]), taken.lease)
    assert [e.sequence for e in await b.read_events("acme", "j1", 0, 10, 1 << 20)] == [1, 2]


async def test_membership_counts_live_replicas_not_draining_or_gone_ones(replicas):
    a, b, c = replicas
    await a.heartbeat("a", LEASE_S)
    await b.heartbeat("b", 0.3)  # dies: stops beating
    assert (await c.heartbeat("c", LEASE_S)).live_replicas == 3
    await a.heartbeat("a", LEASE_S, draining=True)
    assert (await c.heartbeat("c", LEASE_S)).live_replicas == 2
    await anyio.sleep(0.5)
    assert (await c.heartbeat("c", LEASE_S)).live_replicas == 1
    await a.leave("a")
    assert (await a.heartbeat("a", LEASE_S)).live_replicas == 2


async def _next_change(changes: AsyncIterator[Change]) -> Change:
    with anyio.fail_after(5):
        return await anext(changes)


async def test_commits_cancels_and_releases_wake_the_other_replicas(replicas):
    a, b, _ = replicas
    await _jobs(a, "j1")
    changes = b.changes()
    try:
        assert (await _next_change(changes)).kind == RESYNC  # listening from now on
        lease = (await a.claim_job("j1", "a", LEASE_S)).lease
        await a.commit("j1", JobUpdate(events=[_event(2), _event(3)]), lease)
        assert await _next_change(changes) == Change(EVENTS, "j1", 3)
        await a.commit("j1", JobUpdate(journal=[JournalRow(0, "plan", b"p")]), lease)
        await a.request_cancel("acme", "j1")
        assert await _next_change(changes) == Change(CANCEL, "j1")  # the journal said nothing
        await a.release_lease(lease)
        assert await _next_change(changes) == Change(FREED, "j1")
    finally:
        await changes.aclose()


async def test_watch_slots_hold_a_tenants_limit(storage: Storage):
    await storage.heartbeat("r1", LEASE_S)
    for i in range(2):
        await storage.hold_watcher(f"w{i}", "r1", "acme", 2)
    with pytest.raises(QuotaExceeded) as refused:
        await storage.hold_watcher("w2", "r1", "acme", 2)
    assert (refused.value.limit, refused.value.value) == ("max_watchers", 2)
    await storage.hold_watcher("other", "r1", "globex", 2)  # another tenant's slots
    await storage.release_watcher("w0")
    await storage.hold_watcher("w2", "r1", "acme", 2)


async def test_watch_slots_hold_across_replicas_and_a_dead_ones_are_freed(replicas):
    a, b, c = replicas
    await a.heartbeat("a", LEASE_S)
    await b.heartbeat("b", 0.3)
    outcomes = await asyncio.gather(
        *((a, b)[i % 2].hold_watcher(f"w{i}", ("a", "b")[i % 2], "acme", 3) for i in range(10)),
        return_exceptions=True,
    )
    assert sum(o is None for o in outcomes) == 3
    assert all(o is None or isinstance(o, QuotaExceeded) for o in outcomes)
    await anyio.sleep(0.5)  # b stops beating: its streams no longer count
    b_held = sum(o is None for i, o in enumerate(outcomes) if i % 2)
    for i in range(b_held):
        await c.hold_watcher(f"more{i}", "a", "acme", 3)
    with pytest.raises(QuotaExceeded):
        await c.hold_watcher("one-too-many", "a", "acme", 3)
