"""The StudyStore role, alike on SQLite and PostgreSQL (see conftest.py): creation deduplicated
by request_id, chunks idempotent, a study another tenant cannot see, one start, queries paged in
topic order, leases that one driver holds at a time, one end."""

from __future__ import annotations

import asyncio
from typing import Protocol

import anyio
import pytest

from tierank.resources import STUDY_DRAFT, STUDY_RUNNING
from tierank.server.storage.base import (
    ChunkAdded,
    Storage,
    StudyChunk,
    StudyQueryRow,
    StudyRecord,
)
from tierank.v1 import study_pb2

SUCCEEDED = study_pb2.STUDY_STATE_SUCCEEDED
CANCELLED = study_pb2.STUDY_STATE_CANCELLED
LEASE_S = 30.0
SHORT_LEASE_S = 0.5


class Backend(Protocol):
    name: str

    async def open(self) -> Storage: ...


def _study(study_id: str, tenant: str = "acme", request_id: str = "") -> StudyRecord:
    return StudyRecord(
        study_id=study_id,
        tenant=tenant,
        request_id=request_id,
        state=STUDY_DRAFT,
        spec=f"spec of {study_id}".encode(),
        create_time=1000.0,
        update_time=1000.0,
        inputs=study_pb2.StudyInputs().SerializeToString(),
        progress=study_pb2.StudyProgress().SerializeToString(),
    )


def _count_one_chunk(stored: bytes) -> bytes:
    inputs = study_pb2.StudyInputs.FromString(stored)
    inputs.chunks += 1
    return inputs.SerializeToString()


def _chunks_counted(record: StudyRecord | None) -> int:
    assert record is not None
    return study_pb2.StudyInputs.FromString(record.inputs).chunks


def _first_round(stored: bytes) -> bytes:
    inputs = study_pb2.StudyInputs.FromString(stored)
    inputs.rounds.add(round=len(inputs.rounds), systems=["bm25"])
    return inputs.SerializeToString()


def _rounds(record: StudyRecord | None) -> list[int]:
    assert record is not None
    return [r.round for r in study_pb2.StudyInputs.FromString(record.inputs).rounds]


def _queries(count: int) -> list[tuple[StudyQueryRow, bytes]]:
    return [
        (StudyQueryRow(f"q{position}", position, position + 2), f"pool {position}".encode())
        for position in range(1, count + 1)
    ]


async def _running(storage: Storage, study_id: str, queries: int = 3) -> None:
    await storage.create_study(_study(study_id))
    assert await storage.start_study(
        study_id, _queries(queries), b"progress at start", _first_round
    )


async def test_a_request_id_makes_one_study_per_tenant(storage: Storage):
    first = await storage.create_study(_study("s1", request_id="r"))
    assert first.study_id == "s1"
    again = await storage.create_study(_study("s2", request_id="r"))
    assert again.study_id == "s1" and again.spec == first.spec
    # Another tenant's request_id is its own; an empty one deduplicates nothing.
    assert (await storage.create_study(_study("s3", "globex", "r"))).study_id == "s3"
    assert (await storage.create_study(_study("s4"))).study_id == "s4"
    assert (await storage.create_study(_study("s5"))).study_id == "s5"
    listed = await storage.list_studies("acme", 10, None)
    assert [s.study_id for s in listed] == ["s5", "s4", "s1"]
    assert [s.study_id for s in await storage.list_studies("acme", 10, "s4")] == ["s1"]


async def test_concurrent_creates_with_one_request_id_make_one_study(storage: Storage):
    made = await asyncio.gather(
        *(storage.create_study(_study(f"s{i}", request_id="same")) for i in range(6))
    )
    assert len({record.study_id for record in made}) == 1
    assert len(await storage.list_studies("acme", 10, None)) == 1


async def test_a_chunk_counts_once_and_chunks_read_back_in_order(storage: Storage):
    await storage.create_study(_study("s1"))
    for name in ("a", "b", "c"):
        added = await storage.add_study_chunk(
            "acme", "s1", StudyChunk(name, f"payload {name}".encode()), _count_one_chunk
        )
        assert added is ChunkAdded.ADDED
    resent = await storage.add_study_chunk(
        "acme", "s1", StudyChunk("b", b"another payload"), _count_one_chunk
    )
    assert resent is ChunkAdded.SEEN
    assert await storage.read_study_chunks("s1") == [b"payload a", b"payload b", b"payload c"]
    assert _chunks_counted(await storage.get_study("acme", "s1")) == 3


async def test_chunks_sent_at_once_are_each_counted(storage: Storage):
    await storage.create_study(_study("s1"))
    results = await asyncio.gather(
        *(
            storage.add_study_chunk("acme", "s1", StudyChunk(f"c{i}", b"x"), _count_one_chunk)
            for i in range(12)
        )
    )
    assert set(results) == {ChunkAdded.ADDED}
    assert _chunks_counted(await storage.get_study("acme", "s1")) == 12
    assert len(await storage.read_study_chunks("s1")) == 12


async def test_a_running_study_takes_no_chunk_an_ended_one_does_and_a_resent_one_is_seen(
    storage: Storage,
):
    await storage.create_study(_study("s1"))
    chunk = StudyChunk("first", b"inputs")
    assert await storage.add_study_chunk("acme", "s1", chunk, _count_one_chunk) is ChunkAdded.ADDED
    assert await storage.start_study("s1", _queries(2), b"p", _first_round)
    late = StudyChunk("late", b"more")
    assert await storage.add_study_chunk("acme", "s1", late, _count_one_chunk) is ChunkAdded.CLOSED
    assert await storage.add_study_chunk("acme", "s1", chunk, _count_one_chunk) is ChunkAdded.SEEN
    assert await storage.read_study_chunks("s1") == [b"inputs"]
    assert _chunks_counted(await storage.get_study("acme", "s1")) == 1
    # Ended, it takes inputs again (runs to add), counted with the rounds kept.
    assert await storage.finish_study("s1", SUCCEEDED, b"final", b"report")
    assert await storage.add_study_chunk("acme", "s1", late, _count_one_chunk) is ChunkAdded.ADDED
    assert await storage.read_study_chunks("s1") == [b"inputs", b"more"]
    record = await storage.get_study("acme", "s1")
    assert _chunks_counted(record) == 2 and _rounds(record) == [0]
    # A count that refuses a chunk adds nothing.
    refused = StudyChunk("refused", b"topics")
    assert (
        await storage.add_study_chunk("acme", "s1", refused, lambda _: None) is ChunkAdded.REFUSED
    )
    assert len(await storage.read_study_chunks("s1")) == 2
    # A draft cancelled before it started takes nothing.
    await storage.create_study(_study("s2"))
    assert await storage.request_study_cancel("acme", "s2")
    assert await storage.finish_study("s2", CANCELLED, b"p", b"")
    assert await storage.add_study_chunk("acme", "s2", late, _count_one_chunk) is ChunkAdded.CLOSED


async def test_an_ended_study_is_extended_once_with_its_queries_replaced_or_added(
    storage: Storage,
):
    await _running(storage, "s1", queries=3)
    assert not await storage.extend_study("s1", b"spec 2", _queries(1), b"p", _first_round)
    await storage.set_study_query_job("s1", "q2", "job-2")
    await storage.assign_study_query("s1", "q2", b"assigned 2")
    await storage.finish_study_query("s1", "q2", b"outcome 2", b"progress")
    await storage.finish_study_query("s1", "q3", b"outcome 3", b"progress")
    assert await storage.request_study_cancel("acme", "s1")
    assert await storage.finish_study("s1", CANCELLED, b"final", b"report")
    extended = [
        (StudyQueryRow("q2", 2, 9, carried=b"outcome 2"), b"pool 2 grown"),
        (StudyQueryRow("q4", 4, 6), b"pool 4"),
    ]
    assert await storage.extend_study("s1", b"spec 2", extended, b"progress 2", _first_round)
    assert not await storage.extend_study("s1", b"spec 3", extended, b"p", _first_round)
    record = await storage.get_study("acme", "s1")
    assert record is not None
    assert (record.state, record.spec, record.progress) == (STUDY_RUNNING, b"spec 2", b"progress 2")
    assert record.end_time == 0 and not record.cancel_requested
    assert _rounds(record) == [0, 1]
    rows = {row.query_id: row for row in await storage.study_queries("s1", 0, 100)}
    assert list(rows) == ["q1", "q2", "q3", "q4"]
    assert (rows["q2"].pool_size, rows["q2"].job_id, rows["q2"].assignment) == (9, "", b"")
    assert (rows["q2"].outcome, rows["q2"].carried) == (b"", b"outcome 2")
    assert (rows["q3"].outcome, rows["q3"].carried) == (b"outcome 3", b"")
    assert (rows["q4"].position, rows["q4"].pool_size, rows["q4"].carried) == (4, 6, b"")
    assert await storage.read_study_pool("s1", "q2") == b"pool 2 grown"
    unfinished = await storage.study_queries("s1", 0, 100, unfinished=True)
    assert [row.query_id for row in unfinished] == ["q1", "q2", "q4"]
    # Running again: claimed like any running study, and another tenant cannot see it.
    assert [r.study_id for r in await storage.claim_studies("a", LEASE_S, 10)] == ["s1"]
    assert await storage.get_study("globex", "s1") is None


async def test_another_tenant_sees_and_changes_nothing(storage: Storage):
    await _running(storage, "s1")
    assert await storage.finish_study("s1", SUCCEEDED, b"final", b"the report")
    await storage.create_study(_study("s2"))
    assert await storage.get_study("globex", "s1") is None
    assert await storage.get_study("globex", "s2") is None
    assert await storage.study_report("globex", "s1") == b""
    assert await storage.list_studies("globex", 10, None) == []
    chunk = StudyChunk("c", b"x")
    assert (
        await storage.add_study_chunk("globex", "s2", chunk, _count_one_chunk)
        is ChunkAdded.NO_STUDY
    )
    assert (
        await storage.add_study_chunk("acme", "missing", chunk, _count_one_chunk)
        is ChunkAdded.NO_STUDY
    )
    assert not await storage.request_study_cancel("globex", "s2")
    own = await storage.get_study("acme", "s2")
    assert own is not None and not own.cancel_requested and _chunks_counted(own) == 0
    assert await storage.read_study_chunks("s2") == []
    assert await storage.study_report("acme", "s1") == b"the report"


async def test_a_study_starts_once_with_its_queries(storage: Storage):
    await storage.create_study(_study("s1"))
    assert await storage.start_study("s1", _queries(3), b"progress at start", _first_round)
    assert not await storage.start_study("s1", _queries(5), b"progress again", _first_round)
    record = await storage.get_study("acme", "s1")
    assert record is not None and record.state == STUDY_RUNNING
    assert record.start_time > 0 and record.progress == b"progress at start"
    rows = await storage.study_queries("s1", 0, 100)
    assert [(r.query_id, r.position, r.pool_size) for r in rows] == [
        ("q1", 1, 3),
        ("q2", 2, 4),
        ("q3", 3, 5),
    ]
    assert all(not (r.job_id or r.assignment or r.outcome) for r in rows)
    assert await storage.read_study_pool("s1", "q2") == b"pool 2"
    assert not await storage.start_study("missing", _queries(1), b"p", _first_round)


async def test_a_draft_marked_cancelled_never_starts(storage: Storage):
    await storage.create_study(_study("s1"))
    assert await storage.request_study_cancel("acme", "s1")
    assert not await storage.start_study("s1", _queries(2), b"p", _first_round)
    record = await storage.get_study("acme", "s1")
    assert record is not None and record.state == STUDY_DRAFT
    assert await storage.study_queries("s1", 0, 10) == []


async def test_queries_are_paged_in_topic_order_and_unfinished_ones_picked_out(
    storage: Storage,
):
    await _running(storage, "s1", queries=7)
    pages, after = [], 0
    while page := await storage.study_queries("s1", after, 3):
        pages.append([row.query_id for row in page])
        after = page[-1].position
    assert pages == [["q1", "q2", "q3"], ["q4", "q5", "q6"], ["q7"]]

    await storage.assign_study_query("s1", "q2", b"assigned 2")
    await storage.set_study_query_job("s1", "q2", "job-2")
    await storage.finish_study_query("s1", "q2", b"outcome 2", b"progress 1")
    await storage.finish_study_query("s1", "q5", b"outcome 5", b"progress 2")
    await storage.assign_study_query("s1", "q3", b"assigned 3")
    await storage.set_study_query_job("s1", "q3", "job-3")

    unfinished = await storage.study_queries("s1", 0, 100, unfinished=True)
    assert [row.query_id for row in unfinished] == ["q1", "q3", "q4", "q6", "q7"]
    assert [row.query_id for row in await storage.study_queries("s1", 0, 2, unfinished=True)] == [
        "q1",
        "q3",
    ]
    assert [row.query_id for row in await storage.study_queries("s1", 3, 2, unfinished=True)] == [
        "q4",
        "q6",
    ]
    by_id = {row.query_id: row for row in await storage.study_queries("s1", 0, 100)}
    assert (by_id["q2"].job_id, by_id["q2"].assignment, by_id["q2"].outcome) == (
        "job-2",
        b"assigned 2",
        b"outcome 2",
    )
    assert (by_id["q3"].job_id, by_id["q3"].assignment, by_id["q3"].outcome) == (
        "job-3",
        b"assigned 3",
        b"",
    )
    record = await storage.get_study("acme", "s1")
    assert record is not None and record.progress == b"progress 2"


async def test_ended_queries_reopened_carry_their_outcome_and_take_a_job_again(
    storage: Storage,
):
    await _running(storage, "s1", queries=3)
    await storage.set_study_query_job("s1", "q1", "job-1")
    await storage.assign_study_query("s1", "q1", b"assigned 1")
    await storage.finish_study_query("s1", "q1", b"outcome 1", b"progress 1")
    await storage.finish_study_query("s1", "q2", b"outcome 2", b"progress 2")
    # q3 has not ended: reopening it changes nothing.
    await storage.reopen_study_queries("s1", ["q1", "q3"], b"progress 3")
    rows = {row.query_id: row for row in await storage.study_queries("s1", 0, 10)}
    assert (rows["q1"].job_id, rows["q1"].assignment, rows["q1"].outcome) == ("", b"", b"")
    assert rows["q1"].carried == b"outcome 1"
    assert (rows["q2"].outcome, rows["q2"].carried) == (b"outcome 2", b"")
    assert (rows["q3"].outcome, rows["q3"].carried) == (b"", b"")
    unfinished = await storage.study_queries("s1", 0, 10, unfinished=True)
    assert [row.query_id for row in unfinished] == ["q1", "q3"]
    record = await storage.get_study("acme", "s1")
    assert record is not None and record.progress == b"progress 3"


async def test_a_lease_keeps_other_drivers_off_until_it_runs_out(storage: Storage):
    await _running(storage, "s1")
    await storage.create_study(_study("draft"))
    claimed = await storage.claim_studies("a", SHORT_LEASE_S, 10)
    assert [record.study_id for record in claimed] == ["s1"]  # never a draft
    assert await storage.claim_studies("b", LEASE_S, 10) == []
    # Its holder renews it, and may for as long as it likes.
    assert [r.study_id for r in await storage.claim_studies("a", SHORT_LEASE_S, 10)] == ["s1"]
    await anyio.sleep(SHORT_LEASE_S + 0.3)
    taken = await storage.claim_studies("b", LEASE_S, 10)
    assert [record.study_id for record in taken] == ["s1"]
    assert await storage.claim_studies("a", LEASE_S, 10) == []


async def test_one_study_is_claimed_and_renewed_by_one_driver_at_a_time(storage: Storage):
    await _running(storage, "s1")
    await _running(storage, "s2")
    await storage.create_study(_study("draft"))
    claimed = await storage.claim_study("s1", "a", SHORT_LEASE_S)
    assert claimed is not None and claimed.study_id == "s1" and claimed.state == STUDY_RUNNING
    assert await storage.claim_study("s1", "b", LEASE_S) is None
    assert await storage.claim_study("draft", "a", LEASE_S) is None
    assert await storage.claim_study("missing", "a", LEASE_S) is None
    # Only the study asked for: s2 stays free for anyone.
    assert [r.study_id for r in await storage.claim_studies("b", LEASE_S, 10)] == ["s2"]
    assert await storage.claim_study("s1", "a", SHORT_LEASE_S) is not None  # renewed
    await anyio.sleep(SHORT_LEASE_S + 0.3)
    assert await storage.claim_study("s1", "b", LEASE_S) is not None
    assert await storage.claim_study("s1", "a", LEASE_S) is None
    assert await storage.claim_studies("a", LEASE_S, 10) == []
    assert await storage.finish_study("s1", SUCCEEDED, b"p", b"")
    assert await storage.claim_study("s1", "b", LEASE_S) is None


async def test_claims_are_limited_and_do_not_overlap(storage: Storage):
    for i in range(5):
        await _running(storage, f"s{i}", queries=1)
    first = await storage.claim_studies("a", LEASE_S, 2)
    second = await storage.claim_studies("b", LEASE_S, 10)
    assert len(first) == 2
    assert sorted(r.study_id for r in first + second) == [f"s{i}" for i in range(5)]


async def test_drivers_claiming_at_once_never_share_a_study(storage: Storage):
    for i in range(8):
        await _running(storage, f"s{i}", queries=1)
    claims = await asyncio.gather(
        *(storage.claim_studies(f"driver{i}", LEASE_S, 3) for i in range(6))
    )
    claimed = [record.study_id for batch in claims for record in batch]
    assert sorted(claimed) == [f"s{i}" for i in range(8)]


async def test_a_study_ends_once_and_is_claimed_no_more(storage: Storage):
    await _running(storage, "s1")
    assert await storage.claim_studies("a", LEASE_S, 10)
    assert await storage.finish_study("s1", SUCCEEDED, b"final progress", b"report")
    assert not await storage.finish_study(
        "s1", study_pb2.STUDY_STATE_FAILED, b"other", b"", error_code=13, error_message="late"
    )
    record = await storage.get_study("acme", "s1")
    assert record is not None
    assert (record.state, record.progress, record.error_code) == (SUCCEEDED, b"final progress", 0)
    assert record.end_time >= record.start_time > 0
    # Get and List leave the report out; study_report has it.
    assert record.report == b""
    assert [r.report for r in await storage.list_studies("acme", 10, None)] == [b""]
    assert await storage.study_report("acme", "s1") == b"report"
    assert await storage.claim_studies("a", LEASE_S, 10) == []
    assert await storage.claim_studies("b", LEASE_S, 10) == []
    # An ended study's progress is what it ended with.
    await storage.update_study_progress("s1", b"late progress")
    again = await storage.get_study("acme", "s1")
    assert again is not None and again.progress == b"final progress"
    assert not await storage.request_study_cancel("acme", "s1")


async def test_only_an_ended_study_of_the_tenant_takes_a_new_report(storage: Storage):
    await _running(storage, "s1")
    assert not await storage.replace_study_report("acme", "s1", b"calibrated"), "running"
    assert await storage.finish_study("s1", SUCCEEDED, b"final progress", b"report")
    assert not await storage.replace_study_report("other", "s1", b"theirs"), "another tenant's"
    assert await storage.study_report("acme", "s1") == b"report"
    assert await storage.replace_study_report("acme", "s1", b"calibrated")
    assert await storage.study_report("acme", "s1") == b"calibrated"
    record = await storage.get_study("acme", "s1")
    assert record is not None
    assert (record.state, record.progress) == (SUCCEEDED, b"final progress"), "only the report"


async def test_a_failure_is_recorded_with_its_error(storage: Storage):
    await _running(storage, "s1")
    assert await storage.finish_study(
        "s1", study_pb2.STUDY_STATE_FAILED, b"p", b"", error_code=13, error_message="broke: é"
    )
    record = await storage.get_study("acme", "s1")
    assert record is not None
    assert (record.state, record.error_code, record.error_message) == (
        study_pb2.STUDY_STATE_FAILED,
        13,
        "broke: é",
    )


@pytest.mark.parametrize("start", [False, True], ids=["draft", "running"])
async def test_a_cancel_is_marked_on_a_draft_or_running_study(storage: Storage, start: bool):
    if start:
        await _running(storage, "s1")
    else:
        await storage.create_study(_study("s1"))
    assert await storage.request_study_cancel("acme", "s1")
    record = await storage.get_study("acme", "s1")
    assert record is not None and record.cancel_requested
    if start:
        claimed = await storage.claim_studies("a", LEASE_S, 10)
        assert [r.cancel_requested for r in claimed] == [True]
    assert await storage.finish_study("s1", CANCELLED, b"p", b"")
    assert not await storage.request_study_cancel("acme", "s1")


async def test_progress_of_a_running_study_is_recorded(storage: Storage):
    await _running(storage, "s1")
    await storage.update_study_progress("s1", b"half way")
    record = await storage.get_study("acme", "s1")
    assert record is not None and record.progress == b"half way"
    assert record.update_time >= record.start_time


async def test_studies_survive_reopening_and_a_dead_processs_lease_holds_where_it_must(
    backend: Backend,
):
    """On PostgreSQL a replica that is gone keeps its lease until it runs out (another replica
    may still be running); SQLite's file lock admits one process, so the lease of the process
    that held the file before is void at once: a restarted server resumes its studies now."""
    storage = await backend.open()
    try:
        await _running(storage, "s1", queries=2)
        await storage.set_study_query_job("s1", "q1", "job-1")
        assert await storage.claim_studies("gone", LEASE_S, 10)
    finally:
        await storage.close()
    reopened = await backend.open()
    try:
        rows = await reopened.study_queries("s1", 0, 10)
        assert [(r.query_id, r.job_id) for r in rows] == [("q1", "job-1"), ("q2", "")]
        record = await reopened.get_study("acme", "s1")
        assert record is not None and record.state == STUDY_RUNNING
        claimed = [r.study_id for r in await reopened.claim_studies("restarted", LEASE_S, 10)]
        assert claimed == ([] if backend.name == "postgres" else ["s1"])
    finally:
        await reopened.close()
