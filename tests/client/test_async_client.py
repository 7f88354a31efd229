"""AsyncClient against a real server over loopback gRPC."""

from __future__ import annotations

import asyncio

import grpc
import pytest

from tierank.client import AsyncClient, JobEvent, JobSpec, TierankError, job_spec
from tierank.v1 import rank_pb2


async def collect(events) -> list[JobEvent]:
    return [event async for event in events]


def flattened(tiers) -> list[str]:
    return [candidate_id for tier in tiers for candidate_id in tier.candidate_ids]


async def test_rank_streams_every_event_once_until_settled(
    tierank_server: str, example_spec: JobSpec
) -> None:
    async with AsyncClient(tierank_server) as client:
        events = await collect(client.rank(example_spec, timeout=30))
        verdicts = [e.verdict for e in events if e.HasField("verdict")]
        audited = [await client.get_verdict(events[0].job, v.call_id) for v in verdicts]

    assert [a.verdict for a in audited] == verdicts
    assert [e.sequence for e in events] == list(range(1, len(events) + 1))
    assert events[0].WhichOneof("kind") == "accepted"
    assert events[-1].WhichOneof("kind") == "completed"
    assert events[-1].completed.reason == rank_pb2.COMPLETION_REASON_SETTLED
    assert len({e.job for e in events}) == 1
    ranked = flattened(events[-1].completed.tiers)
    assert sorted(ranked) == sorted(c.id for c in example_spec.candidates)


async def test_create_get_and_watch_agree(tierank_server: str, example_spec: JobSpec) -> None:
    async with AsyncClient(tierank_server) as client:
        created = await client.create_job(example_spec, timeout=10)
        assert created.name.startswith("jobs/")
        events = await collect(client.watch_job(created.name, timeout=30))
        job = await client.get_job(created.name, timeout=10)

    assert job.state == rank_pb2.JOB_STATE_SUCCEEDED
    assert job.last_sequence == events[-1].sequence
    assert list(job.tiers) == list(events[-1].completed.tiers)
    assert job.spec.query == example_spec.query


async def test_watch_after_sequence_returns_only_the_tail(
    tierank_server: str, example_spec: JobSpec
) -> None:
    async with AsyncClient(tierank_server) as client:
        job = await client.create_job(example_spec)
        everything = await collect(client.watch_job(job.name))
        # A bare id works as well as "jobs/{id}".
        tail = await collect(client.watch_job(job.name.removeprefix("jobs/"), after_sequence=2))

    assert len(everything) > 3
    assert tail == everything[2:]


async def test_request_id_makes_creation_idempotent(
    tierank_server: str, example_spec: JobSpec
) -> None:
    async with AsyncClient(tierank_server) as client:
        first = await client.create_job(example_spec, request_id="idem-async-1")
        retry = await client.create_job(example_spec, request_id="idem-async-1")
        other = await client.create_job(example_spec, request_id="idem-async-2")

    assert retry.name == first.name
    assert other.name != first.name
    assert first.request_id == "idem-async-1"


async def test_list_jobs_walks_every_page(tierank_server: str, example_spec: JobSpec) -> None:
    # The shared server holds other tests' jobs too: compare small pages with one big page.
    async with AsyncClient(tierank_server) as client:
        created = {(await client.create_job(example_spec)).name for _ in range(5)}
        for name in created:
            await collect(client.watch_job(name, timeout=30))
        one_page = [job.name async for job in client.list_jobs(page_size=1000)]
        paged = [job.name async for job in client.list_jobs(page_size=2)]
        succeeded = [job async for job in client.list_jobs(state="succeeded", page_size=3)]

    assert len(one_page) >= 5
    assert paged == one_page
    assert created <= set(paged)
    assert created <= {job.name for job in succeeded}
    assert {job.state for job in succeeded} == {rank_pb2.JOB_STATE_SUCCEEDED}


async def test_cancel_keeps_provisional_tiers(tierank_server: str, slow_spec: JobSpec) -> None:
    async with AsyncClient(tierank_server) as client:
        job = await client.create_job(slow_spec)
        await client.cancel_job(job.name, timeout=10)
        events = await collect(client.watch_job(job.name, timeout=30))
        cancelled = await client.get_job(job.name)

    assert cancelled.state == rank_pb2.JOB_STATE_CANCELLED
    assert cancelled.completion_reason == rank_pb2.COMPLETION_REASON_CANCELLED
    assert events[-1].completed.reason == rank_pb2.COMPLETION_REASON_CANCELLED
    assert not all(tier.settled for tier in cancelled.tiers)


async def test_invalid_spec_surfaces_field_violations(tierank_server: str) -> None:
    spec = job_spec(
        "",
        [{"id": "a", "text": "x"}, {"id": "a", "text": "y"}],
        judges=["no-such-provider"],
        batch_size=1,
    )
    async with AsyncClient(tierank_server) as client:
        with pytest.raises(TierankError) as raised:
            await client.create_job(spec)

    error = raised.value
    assert error.code == grpc.StatusCode.INVALID_ARGUMENT
    fields = {violation.field for violation in error.field_violations}
    assert {"spec.query", "spec.candidates[1].id", "spec.batch_size"} <= fields
    assert "spec.judges[0].provider" in fields
    assert "spec.batch_size: " in error.describe()


async def test_rank_with_invalid_spec_fails_without_retrying(tierank_server: str) -> None:
    spec = job_spec("q", [{"id": "only", "text": "one candidate"}])
    async with AsyncClient(tierank_server) as client:
        with pytest.raises(TierankError) as raised:
            await collect(client.rank(spec))
    assert raised.value.code == grpc.StatusCode.INVALID_ARGUMENT
    assert [v.field for v in raised.value.field_violations] == ["spec.candidates"]


async def test_unknown_job_is_not_found(tierank_server: str) -> None:
    async with AsyncClient(tierank_server) as client:
        for call in (
            client.get_job("jobs/does-not-exist"),
            client.cancel_job("does-not-exist"),
            collect(client.watch_job("jobs/does-not-exist")),
        ):
            with pytest.raises(TierankError) as raised:
                await call
            assert raised.value.code == grpc.StatusCode.NOT_FOUND


async def test_timeout_becomes_deadline_exceeded(tierank_server: str, slow_spec: JobSpec) -> None:
    async with AsyncClient(tierank_server) as client:
        job = await client.create_job(slow_spec)
        try:
            with pytest.raises(TierankError) as raised:
                await collect(client.watch_job(job.name, timeout=0.3))
        finally:
            await client.cancel_job(job.name)
    assert raised.value.code == grpc.StatusCode.DEADLINE_EXCEEDED


async def test_no_server_is_unavailable() -> None:
    async with AsyncClient("127.0.0.1:1") as client:
        with pytest.raises(TierankError) as raised:
            await client.wait_ready(timeout=0.2)
        assert raised.value.code == grpc.StatusCode.UNAVAILABLE
        with pytest.raises(TierankError) as raised:
            await asyncio.wait_for(client.get_job("jobs/x"), 10)
        assert raised.value.code == grpc.StatusCode.UNAVAILABLE


async def test_get_job_full_view_carries_candidate_texts(
    tierank_server: str, example_spec: JobSpec
) -> None:
    async with AsyncClient(tierank_server) as client:
        created = await client.create_job(example_spec, full=True)
        basic = await client.get_job(created.name)
    assert [c.text for c in created.spec.candidates] == [c.text for c in example_spec.candidates]
    assert not any(c.text for c in basic.spec.candidates)
