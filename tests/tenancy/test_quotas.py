"""Quotas over real gRPC: each limit refuses with RESOURCE_EXHAUSTED naming itself (QuotaFailure,
and RetryInfo for a rate), concurrency never overshoots a daily budget, and one tenant's limits
never touch another's."""

from __future__ import annotations

import asyncio

import grpc
import pytest
from google.rpc import error_details_pb2
from grpc_status import rpc_status

from tierank.client import candidate, job_spec, judge
from tierank.v1 import admin_pb2, eval_pb2, rank_pb2


def slow_spec(n: int = 6, latency_ms: int = 1500, **fields) -> rank_pb2.JobSpec:
    pool = [candidate(f"c{i}", f"passage {i}", metadata={"score": str(i)}) for i in range(n)]
    oracle = judge("oracle", options={"latency_ms": str(latency_ms), "noise": "0"})
    return job_spec("q", pool, judges=[oracle], batch_size=3, **fields)


def quota_failure(error: grpc.aio.AioRpcError) -> tuple[str, float | None]:
    """(the QuotaFailure's description, RetryInfo's delay in seconds or None)."""
    description, delay = "", None
    for detail in rpc_status.from_call(error).details:
        failure, retry = error_details_pb2.QuotaFailure(), error_details_pb2.RetryInfo()
        if detail.Unpack(failure):
            description = failure.violations[0].description
        elif detail.Unpack(retry):
            delay = retry.retry_delay.ToTimedelta().total_seconds()
    return description, delay


async def create(session, spec):
    return await session.rank.CreateJob(
        rank_pb2.CreateJobRequest(spec=spec), metadata=session.metadata
    )


async def test_max_candidates_refuses_a_bigger_job_of_that_tenant_only(keyed_server):
    small = keyed_server.session(await keyed_server.member_key("small", max_candidates=5))
    other = keyed_server.session(await keyed_server.member_key("other"))
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await create(small, slow_spec(n=6, latency_ms=0))
    assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    description, _ = quota_failure(refused.value)
    assert description.startswith("max_candidates=5")
    await create(small, slow_spec(n=5, latency_ms=0))
    await create(other, slow_spec(n=6, latency_ms=0))


async def test_max_concurrent_jobs_holds_under_concurrent_creates(keyed_server):
    team = keyed_server.session(await keyed_server.member_key("team", max_concurrent_jobs=2))
    outcomes = await asyncio.gather(
        *(create(team, slow_spec()) for _ in range(6)), return_exceptions=True
    )
    created = [o for o in outcomes if isinstance(o, rank_pb2.Job)]
    refused = [o for o in outcomes if isinstance(o, grpc.aio.AioRpcError)]
    assert len(created) == 2 and len(refused) == 4
    assert all(e.code() == grpc.StatusCode.RESOURCE_EXHAUSTED for e in refused)
    assert quota_failure(refused[0])[0].startswith("max_concurrent_jobs=2")
    await team.rank.CancelJob(
        rank_pb2.CancelJobRequest(name=created[0].name), metadata=team.metadata
    )
    await create(team, slow_spec())  # a slot is free again
    usage = await team.admin.GetUsage(admin_pb2.GetUsageRequest(), metadata=team.metadata)
    assert usage.unfinished_jobs == 2


async def test_jobs_per_minute_says_when_to_retry(keyed_server):
    team = keyed_server.session(await keyed_server.member_key("team", jobs_per_minute=2))
    for _ in range(2):
        await create(team, slow_spec(latency_ms=0))
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await create(team, slow_spec(latency_ms=0))
    description, delay = quota_failure(refused.value)
    assert description.startswith("jobs_per_minute=2")
    assert delay is not None and 0 < delay <= 60


async def test_max_watchers_counts_open_streams(keyed_server):
    team = keyed_server.session(await keyed_server.member_key("team", max_watchers=1))
    job = await create(team, slow_spec(latency_ms=3000))
    first = team.rank.WatchJob(rank_pb2.WatchJobRequest(name=job.name), metadata=team.metadata)
    await first.read()  # the stream is open and counted
    second = team.rank.WatchJob(rank_pb2.WatchJobRequest(name=job.name), metadata=team.metadata)
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await second.read()
    assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert quota_failure(refused.value)[0].startswith("max_watchers=1")
    first.cancel()
    for _ in range(50):  # the server notices the cancel a moment later
        third = team.rank.WatchJob(rank_pb2.WatchJobRequest(name=job.name), metadata=team.metadata)
        try:
            await third.read()
            break
        except grpc.aio.AioRpcError:
            await asyncio.sleep(0.05)
    else:
        pytest.fail("the slot of a closed stream was never freed")
    third.cancel()


async def test_max_watchers_counts_operation_streams_too(keyed_server):
    team = keyed_server.session(await keyed_server.member_key("team", max_watchers=1))
    fill = eval_pb2.FillQrelsRequest(
        qrels=eval_pb2.TextFile(name="q", content="q1 0 a 1\n"),
        runs=[eval_pb2.TextFile(name="r", content="q1 Q0 a 1 2 s\nq1 Q0 b 2 1 s\n")],
        topics=eval_pb2.TextFile(name="t", content="q1\tquery\n"),
        passages=eval_pb2.TextFile(
            name="p", content='{"id": "b", "text": "b", "metadata": {"score": "1"}}\n'
        ),
        judge=rank_pb2.JudgeSpec(provider="oracle"),
    )
    operation = await team.eval.StartFillQrels(fill, metadata=team.metadata)
    job = await create(team, slow_spec(latency_ms=3000))
    first = team.rank.WatchJob(rank_pb2.WatchJobRequest(name=job.name), metadata=team.metadata)
    await first.read()  # the stream is open and counted
    watch = team.eval.WatchOperation(
        eval_pb2.WatchOperationRequest(name=operation.name), metadata=team.metadata
    )
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await watch.read()
    assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert quota_failure(refused.value)[0].startswith("max_watchers=1")
    first.cancel()


async def test_concurrent_jobs_never_overshoot_a_daily_call_budget(keyed_server):
    team = keyed_server.session(await keyed_server.member_key("team", daily_judge_calls=5))
    other = keyed_server.session(await keyed_server.member_key("other"))
    jobs = await asyncio.gather(*(create(team, slow_spec(n=9, latency_ms=200)) for _ in range(8)))
    finals = []
    for job in jobs:
        events = [
            e
            async for e in team.rank.WatchJob(
                rank_pb2.WatchJobRequest(name=job.name), metadata=team.metadata
            )
        ]
        finals.append(events[-1])
    answered = sum(f.completed.stats.judge_calls for f in finals if f.HasField("completed"))
    assert answered <= 5
    reasons = {f.completed.reason for f in finals}
    assert rank_pb2.COMPLETION_REASON_BUDGET_EXHAUSTED in reasons
    usage = await team.admin.GetUsage(admin_pb2.GetUsageRequest(), metadata=team.metadata)
    assert sum(s.calls for s in usage.today) <= 5
    assert usage.reserved.calls == 0  # everything settled
    # Another tenant spends as if nothing happened.
    job = await create(other, slow_spec(n=9, latency_ms=0))
    events = [
        e
        async for e in other.rank.WatchJob(
            rank_pb2.WatchJobRequest(name=job.name), metadata=other.metadata
        )
    ]
    assert events[-1].completed.reason != rank_pb2.COMPLETION_REASON_BUDGET_EXHAUSTED
