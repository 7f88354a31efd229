"""The ProviderBatchJournal role, alike on SQLite and PostgreSQL (see conftest.py): a batch and
its calls read back as journaled and survive a restart, a call finds its newest batch, a batch
is submitted once and ends once, one poller at a time, a batch given up only when none of its
calls is wanted, and a tenant sees only its own batches."""

from __future__ import annotations

import asyncio
from typing import Protocol

import anyio
import pytest

from tierank.server.storage.base import (
    BatchState,
    ProviderBatchCall,
    ProviderBatchRecord,
    Storage,
)

LEASE_S = 30.0
SHORT_LEASE_S = 0.4


class Backend(Protocol):
    name: str

    async def open(self) -> Storage: ...


def _batch(
    batch_id: str, tenant: str = "acme", owner: str = "studies/s1", calls: int = 1
) -> ProviderBatchRecord:
    return ProviderBatchRecord(
        batch_id=batch_id,
        tenant=tenant,
        owner=owner,
        provider="openai",
        model="gpt-4.1",
        calls=calls,
        create_time=1000.0,
    )


async def _journal(
    storage: Storage, batch_id: str, *job_calls: tuple[str, str], **record: str
) -> ProviderBatchRecord:
    """Journal `batch_id` carrying each (job id, call id), under custom ids "{batch_id}-{n}"."""
    batch = _batch(batch_id, calls=len(job_calls), **record)
    calls = [
        ProviderBatchCall(batch_id, f"{batch_id}-{n}", job_id, call_id)
        for n, (job_id, call_id) in enumerate(job_calls)
    ]
    await storage.journal_batch(batch, calls)
    return batch


async def _state(storage: Storage, batch_id: str) -> ProviderBatchRecord:
    record = await storage.get_provider_batch(batch_id)
    assert record is not None
    return record


async def test_a_journaled_batch_reads_back_as_written_and_survives_a_restart(
    backend: Backend,
):
    storage = await backend.open()
    try:
        batch = await _journal(storage, "b1", ("j1", "c1"), ("j1", "c2"))
        assert await storage.get_provider_batch("b1") == batch
        assert batch.state == BatchState.SUBMITTING
        assert await storage.get_provider_batch("missing") is None
    finally:
        await storage.close()
    reopened = await backend.open()
    try:
        assert await reopened.get_provider_batch("b1") == batch
        assert await reopened.batch_of_call("j1", "c2") == (batch, "b1-1")
    finally:
        await reopened.close()


async def test_a_call_finds_the_newest_batch_that_carries_it_with_its_custom_id(
    storage: Storage,
):
    first = await _journal(storage, "b1", ("j1", "c1"), ("j1", "c2"), ("j2", "c1"))
    # c1 of j1 sent again, in a later batch, under another custom id.
    await storage.journal_batch(_batch("b2"), [ProviderBatchCall("b2", "again", "j1", "c1")])
    found = await storage.batch_of_call("j1", "c1")
    assert found is not None and found[0].batch_id == "b2" and found[1] == "again"
    assert await storage.batch_of_call("j1", "c2") == (first, "b1-1")
    assert await storage.batch_of_call("j2", "c1") == (first, "b1-2")  # the job's own call
    assert await storage.batch_of_call("j2", "c2") is None
    assert await storage.batch_of_call("j3", "c1") is None


async def test_a_batch_is_submitted_once(storage: Storage):
    await _journal(storage, "b1", ("j1", "c1"))
    assert await storage.batch_submitted("b1", "batch_abc")
    submitted = await _state(storage, "b1")
    assert submitted.state == BatchState.OPEN and submitted.vendor_id == "batch_abc"
    assert submitted.submit_time > 0 and submitted.update_time == submitted.submit_time
    # Another process recording a second submission of the same batch is told it is late.
    assert not await storage.batch_submitted("b1", "batch_other")
    assert await _state(storage, "b1") == submitted
    # A batch failed before the vendor's answer came back is not opened by that answer.
    await _journal(storage, "b2", ("j1", "c2"))
    await storage.batch_status("b2", BatchState.FAILED, "", "{}", "refused")
    assert not await storage.batch_submitted("b2", "batch_late")
    failed = await _state(storage, "b2")
    assert failed.state == BatchState.FAILED and failed.vendor_id == ""
    assert not await storage.batch_submitted("missing", "batch_x")


async def test_a_batch_found_nowhere_fails_only_while_no_vendor_id_is_recorded(storage: Storage):
    await _journal(storage, "b1", ("j1", "c1"))
    assert await storage.batch_not_submitted("b1", "cut off before the vendor had it")
    failed = await _state(storage, "b1")
    assert failed.state == BatchState.FAILED and failed.end_time > 0
    assert failed.message == "cut off before the vendor had it"
    # One replica found the batch at the vendor first: another that did not cannot fail it.
    await _journal(storage, "b2", ("j1", "c2"))
    assert await storage.batch_submitted("b2", "batch_found")
    assert not await storage.batch_not_submitted("b2", "not found")
    assert (await _state(storage, "b2")).state == BatchState.OPEN


@pytest.mark.parametrize("final", [BatchState.ENDED, BatchState.FAILED])
async def test_an_ended_or_failed_batch_keeps_its_state(storage: Storage, final: BatchState):
    await _journal(storage, "b1", ("j1", "c1"))
    assert await storage.batch_submitted("b1", "batch_abc")
    await storage.batch_status("b1", BatchState.OPEN, "in_progress", '{"processing": 1}')
    polled = await _state(storage, "b1")
    assert (polled.state, polled.vendor_status, polled.counts) == (
        BatchState.OPEN,
        "in_progress",
        '{"processing": 1}',
    )
    assert polled.end_time == 0 and polled.update_time >= polled.submit_time
    # The vendor's message is free text: a NUL and any language are kept as they came.
    message = "expired: résumé \x00 終わり"
    await storage.batch_status("b1", final, "ended", '{"succeeded": 1}', message)
    ended = await _state(storage, "b1")
    assert (ended.state, ended.vendor_status, ended.counts, ended.message) == (
        final,
        "ended",
        '{"succeeded": 1}',
        message,
    )
    assert ended.end_time >= ended.update_time > 0
    # A late or stale write (another replica's older poll) changes nothing any more.
    await storage.batch_status("b1", BatchState.OPEN, "in_progress", '{"processing": 1}')
    other = BatchState.FAILED if final == BatchState.ENDED else BatchState.ENDED
    await storage.batch_status("b1", other, "other", "{}", "other")
    assert await _state(storage, "b1") == ended


async def test_one_poller_at_a_time_until_its_lease_runs_out(storage: Storage):
    await _journal(storage, "b1", ("j1", "c1"))
    await _journal(storage, "b2", ("j1", "c2"))
    assert await storage.take_batch_poll("b1", "a", SHORT_LEASE_S)
    assert not await storage.take_batch_poll("b1", "b", LEASE_S)
    # b2: its poller renews a short lease into a long one, which outlives the short one.
    assert await storage.take_batch_poll("b2", "a", SHORT_LEASE_S)
    assert await storage.take_batch_poll("b2", "a", LEASE_S)
    await anyio.sleep(SHORT_LEASE_S + 0.2)
    assert await storage.take_batch_poll("b1", "b", LEASE_S)  # a's lease ran out
    assert not await storage.take_batch_poll("b1", "a", LEASE_S)
    assert await storage.take_batch_poll("b1", "b", LEASE_S)  # renewed by its holder
    assert not await storage.take_batch_poll("b2", "b", LEASE_S)


async def test_pollers_asking_at_once_get_one_lease(storage: Storage):
    await _journal(storage, "b1", ("j1", "c1"))
    taken = await asyncio.gather(
        *(storage.take_batch_poll("b1", f"replica{i}", LEASE_S) for i in range(8))
    )
    assert sum(taken) == 1


async def test_a_batch_is_given_up_only_when_none_of_its_calls_is_wanted(storage: Storage):
    shared = await _journal(storage, "b1", ("j1", "c1"), ("j2", "c1"))
    own = await _journal(storage, "b2", ("j1", "c2"), ("j1", "c3"))
    await _journal(storage, "b3", ("j1", "c4"))
    await storage.batch_status("b3", BatchState.ENDED, "ended", "{}")
    # b1 still carries j2's call; b3 has ended: nothing to cancel there.
    assert await storage.withdraw_batch_calls("j1") == [own]
    assert await storage.withdraw_batch_calls("j2") == [shared]
    # Asked again (a restart between withdrawing and cancelling), every unended batch of the
    # job with no call wanted is named again.
    assert await storage.withdraw_batch_calls("j1") == [shared, own]
    assert await storage.withdraw_batch_calls("j9") == []
    # Withdrawing marks calls only: the batches and what the vendor says of them stay.
    assert await _state(storage, "b2") == own


async def test_jobs_of_one_batch_withdrawing_at_once_give_each_batch_up_once(storage: Storage):
    """Each job sees the other's calls withdrawn or waits for it: never both still wanted."""
    batches = [
        await _journal(storage, f"b{n}", ("j1", f"c{n}"), ("j2", f"c{n}")) for n in range(10)
    ]
    first, second = await asyncio.gather(
        storage.withdraw_batch_calls("j1"), storage.withdraw_batch_calls("j2")
    )
    given_up = sorted(first + second, key=lambda batch: batch.batch_id)
    assert given_up == batches


async def test_a_tenant_sees_only_its_own_batches_of_an_owner(storage: Storage):
    # Journaled newest first: the listing's order is the batches', not the writes'.
    await _journal(storage, "b2", ("j1", "c2"))
    first = await _journal(storage, "b1", ("j1", "c1"))
    other_owner = await _journal(storage, "b3", ("j2", "c1"), owner="studies/s2")
    other_tenant = await _journal(storage, "b4", ("j3", "c1"), tenant="globex")
    await storage.batch_status("b2", BatchState.ENDED, "ended", "{}")
    ended = await _state(storage, "b2")
    assert await storage.owner_batches("acme", "studies/s1") == [first, ended]
    assert await storage.owner_batches("acme", "studies/s1", unended_only=True) == [first]
    assert await storage.owner_batches("acme", "studies/s2") == [other_owner]
    assert await storage.owner_batches("globex", "studies/s1") == [other_tenant]
    assert await storage.owner_batches("globex", "studies/s2") == []
    assert await storage.owner_batches("initech", "studies/s1") == []
