"""Creating, cancelling and ending jobs whatever happens to the RPCs around them."""

from __future__ import annotations

import asyncio
import random
from pathlib import Path

import anyio
import grpc
import pytest

from tierank.client._errors import error_from_rpc
from tierank.server.app import serve
from tierank.server.settings import ServerSettings
from tierank.v1 import rank_pb2, rank_pb2_grpc

TERMINAL = (
    rank_pb2.JOB_STATE_SUCCEEDED,
    rank_pb2.JOB_STATE_FAILED,
    rank_pb2.JOB_STATE_CANCELLED,
)


def _field_violations(error: grpc.aio.AioRpcError) -> dict[str, str]:
    return {v.field: v.description for v in error_from_rpc(error).field_violations}


async def _last_event(stub, name: str, timeout: float = 20.0) -> rank_pb2.JobEvent:
    events = [e async for e in stub.WatchJob(rank_pb2.WatchJobRequest(name=name), timeout=timeout)]
    return events[-1]


async def test_a_client_deadline_never_leaves_a_stored_job_unstarted(stub, make_spec):
    """A deadline that cancels CreateJob after the job is stored must not leave it pending."""
    rng = random.Random(2)
    expired = 0
    for attempt in range(80):
        spec = make_spec(n=8, top_k=3, seed=attempt)
        # From "expires before it is sent" to "answered in time", whatever the machine's load.
        deadline = 10 ** rng.uniform(-3.7, -1.3)
        try:
            await stub.CreateJob(rank_pb2.CreateJobRequest(spec=spec), timeout=deadline)
        except grpc.aio.AioRpcError as error:
            assert error.code() == grpc.StatusCode.DEADLINE_EXCEEDED
            expired += 1
    assert expired, "no deadline expired: the test proves nothing"
    listed = await stub.ListJobs(rank_pb2.ListJobsRequest(page_size=200))
    # Some requests expired before the server stored anything; the rest must all run.
    assert listed.jobs, "no request reached the store: the test proves nothing"
    for job in listed.jobs:
        last = await _last_event(stub, job.name)
        assert last.completed.reason == rank_pb2.COMPLETION_REASON_SETTLED, job.name


async def test_a_reused_request_id_with_another_spec_is_refused(stub, make_spec):
    first = await stub.CreateJob(rank_pb2.CreateJobRequest(spec=make_spec(n=10), request_id="once"))
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await stub.CreateJob(rank_pb2.CreateJobRequest(spec=make_spec(n=11), request_id="once"))
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "different spec" in _field_violations(caught.value)["request_id"]
    retried = await stub.CreateJob(
        rank_pb2.CreateJobRequest(spec=make_spec(n=10), request_id="once")
    )
    assert retried.name == first.name
    listed = await stub.ListJobs(rank_pb2.ListJobsRequest())
    assert [j.name for j in listed.jobs] == [first.name]


async def test_a_budget_too_small_for_one_call_ends_budget_exhausted(stub, make_spec):
    spec = make_spec(n=10, budget=rank_pb2.Budget(max_input_tokens=1))
    events = [e async for e in stub.Rank(rank_pb2.RankRequest(spec=spec))]
    completed = events[-1].completed
    assert completed.reason == rank_pb2.COMPLETION_REASON_BUDGET_EXHAUSTED
    assert completed.stats.judge_calls == 0


async def test_cancelling_a_finished_job_changes_nothing(stub, make_spec):
    job = await stub.CreateJob(rank_pb2.CreateJobRequest(spec=make_spec(n=8)))
    last = await _last_event(stub, job.name)
    assert last.completed.reason == rank_pb2.COMPLETION_REASON_SETTLED
    after = await stub.CancelJob(rank_pb2.CancelJobRequest(name=job.name))
    assert after.state == rank_pb2.JOB_STATE_SUCCEEDED
    assert after.completion_reason == rank_pb2.COMPLETION_REASON_SETTLED
    assert after.last_sequence == last.sequence


async def test_during_a_drain_new_jobs_are_refused_and_stopped_jobs_can_be_cancelled(
    tmp_path: Path, make_spec, oracle_judge
):
    settings = ServerSettings(listen="127.0.0.1:0", db=tmp_path / "t.db", shutdown_grace_s=3.0)
    stop = anyio.Event()
    bound: asyncio.Future[str] = asyncio.get_running_loop().create_future()
    server = asyncio.create_task(serve(settings, stop, on_ready=bound.set_result))
    try:
        async with grpc.aio.insecure_channel(await bound) as channel:
            stub = rank_pb2_grpc.RankServiceStub(channel)
            # The slow job holds the drain open; the quick one stops between its calls.
            slow = make_spec(n=20, top_k=0, judges=[oracle_judge(latency_ms="60000")])
            quick = make_spec(n=60, top_k=0, judges=[oracle_judge(noise=0.3, latency_ms="50")])
            await stub.CreateJob(rank_pb2.CreateJobRequest(spec=slow))
            stopped = await stub.CreateJob(rank_pb2.CreateJobRequest(spec=quick))
            await asyncio.sleep(0.3)
            stop.set()
            await asyncio.sleep(0.5)  # the quick job's calls land and its runner returns

            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await stub.CreateJob(rank_pb2.CreateJobRequest(spec=quick))
            assert refused.value.code() == grpc.StatusCode.UNAVAILABLE
            assert "shutting down" in refused.value.details()

            midway = await stub.GetJob(rank_pb2.GetJobRequest(name=stopped.name))
            assert midway.state == rank_pb2.JOB_STATE_RUNNING, "stopped, not finished"
            cancelled = await stub.CancelJob(rank_pb2.CancelJobRequest(name=stopped.name))
            assert cancelled.state == rank_pb2.JOB_STATE_CANCELLED
            assert cancelled.completion_reason == rank_pb2.COMPLETION_REASON_CANCELLED
            events = [e async for e in stub.WatchJob(rank_pb2.WatchJobRequest(name=stopped.name))]
            assert [e.sequence for e in events] == list(range(1, len(events) + 1))
            assert events[-1].completed.reason == rank_pb2.COMPLETION_REASON_CANCELLED
            assert any(e.HasField("verdict") for e in events), "it had answers to keep"
    finally:
        stop.set()
        await server
