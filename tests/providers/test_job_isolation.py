"""One job's settings and one provider hiccup must not cost other jobs, or the job, a judge:
two real jobs on one server against a fake provider (issue 13, items 25 and 26)."""

from __future__ import annotations

import asyncio

import grpc
import pytest
from conftest import StartServer
from fakes import Drop, FakeLLMServer, Hang, HttpError, Recorded, Step, rank_by_score
from job_helpers import (
    completed,
    field_violations,
    judge_stats,
    llm_judge,
    run_job,
    scored_spec,
    verdicts,
)

from tierank.server.judges.llm import MIN_TIMEOUT_S
from tierank.v1 import rank_pb2

SLOW_QUERY = "a query the model is slow on"


async def test_a_timeout_below_the_floor_is_refused_with_a_field_violation(
    judged_server: StartServer,
) -> None:
    stub = await judged_server()
    spec = scored_spec(4, [llm_judge("openai", timeout_seconds=0.01)])
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await stub.CreateJob(rank_pb2.CreateJobRequest(spec=spec))
    assert refused.value.code() is grpc.StatusCode.INVALID_ARGUMENT
    violations = field_violations(refused.value)
    assert f"at least {MIN_TIMEOUT_S:g}" in violations["spec.judges[0].parameters.timeout_seconds"]


async def test_a_job_with_a_short_timeout_cannot_open_the_breaker_for_another_job(
    fake_llm: FakeLLMServer, judged_server: StartServer
) -> None:
    def respond(request: Recorded) -> Step:
        answer = rank_by_score(request)
        return Hang(1.5, then=answer) if SLOW_QUERY in request.prompt else answer

    fake_llm.respond_with("openai", respond)
    # Two provider failures would open the breaker; job A alone makes three timeouts.
    stub = await judged_server(openai={"breaker": {"failure_threshold": 2, "cooldown_s": 60}})
    impatient = scored_spec(
        4, [llm_judge("openai", timeout_seconds=MIN_TIMEOUT_S)], query=SLOW_QUERY
    )
    events_a: list[rank_pb2.JobEvent] = []

    async def watch_a() -> None:
        async for event in stub.Rank(rank_pb2.RankRequest(spec=impatient), timeout=60):
            events_a.append(event)

    job_a = asyncio.create_task(watch_a())
    while not verdicts(events_a):  # A's first call: three attempts, three timeouts
        await asyncio.sleep(0.05)
    events_b = await run_job(stub, scored_spec(8, [llm_judge("openai")], batch_size=4))
    await stub.CancelJob(rank_pb2.CancelJobRequest(name=events_a[0].job))
    await job_a

    failed_a = verdicts(events_a)
    assert failed_a and all(v.failure_reason.startswith("timeout:") for v in failed_a)
    assert not judge_stats(completed(events_a), "openai/any-name").breaker_open
    done_b = completed(events_b)
    assert done_b.reason == rank_pb2.COMPLETION_REASON_SETTLED
    assert [c for tier in done_b.tiers for c in tier.candidate_ids] == [
        f"c{i:03d}" for i in range(8)
    ]
    assert not any(v.failed for v in verdicts(events_b))


async def test_one_dropped_connection_does_not_drop_the_judge(
    fake_llm: FakeLLMServer, judged_server: StartServer
) -> None:
    # The first call loses its connection on every attempt; every later request is answered.
    fake_llm.script("openai", Drop(), Drop(), Drop())
    fake_llm.respond_with("openai", rank_by_score)
    stub = await judged_server()
    events = await run_job(
        stub, scored_spec(12, [llm_judge("openai")], batch_size=4, max_in_flight=1)
    )

    done = completed(events)
    assert done.reason == rank_pb2.COMPLETION_REASON_SETTLED
    failed = [v for v in verdicts(events) if v.failed]
    assert len(failed) == 1 and failed[0].failure_reason.startswith("connection_error:")
    stats = judge_stats(done, "openai/any-name")
    assert stats.failed_calls == 1 and stats.calls > 1
    assert not stats.breaker_open


async def test_breaker_open_reads_false_for_a_judge_dropped_for_429s(
    fake_llm: FakeLLMServer, judged_server: StartServer
) -> None:
    fake_llm.respond_with("openai", lambda request: HttpError(429, {"retry-after": "0"}))
    fake_llm.respond_with("anthropic", rank_by_score)
    stub = await judged_server()
    judges = [llm_judge("openai"), llm_judge("anthropic")]
    events = await run_job(stub, scored_spec(20, judges, batch_size=4, max_in_flight=2))

    done = completed(events)
    assert done.reason == rank_pb2.COMPLETION_REASON_SETTLED
    limited = judge_stats(done, "openai/any-name")
    assert limited.failed_calls >= 5 and limited.last_error.startswith("rate_limited:")
    # Dropped from the job after five failures in a row, but its breaker never opened.
    assert not limited.breaker_open
    assert not judge_stats(done, "anthropic/any-name").breaker_open


async def test_breaker_open_reads_true_when_the_breaker_refused_the_calls(
    fake_llm: FakeLLMServer, judged_server: StartServer
) -> None:
    fake_llm.respond_with("openai", lambda request: HttpError(500, message="boom"))
    fake_llm.respond_with("anthropic", rank_by_score)
    stub = await judged_server(openai={"breaker": {"failure_threshold": 2, "cooldown_s": 60}})
    judges = [llm_judge("openai"), llm_judge("anthropic")]
    events = await run_job(stub, scored_spec(20, judges, batch_size=4, max_in_flight=2))

    done = completed(events)
    broken = judge_stats(done, "openai/any-name")
    assert broken.breaker_open and broken.last_error.startswith("unavailable:")
    assert done.reason == rank_pb2.COMPLETION_REASON_SETTLED


async def test_breaker_open_agrees_with_a_circuit_open_last_error_on_a_judge_kept_in_the_job(
    fake_llm: FakeLLMServer, judged_server: StartServer
) -> None:
    # openai's first call fails twice and opens its breaker; its next calls are refused. The
    # job settles on anthropic's answers before openai has failed five times in a row, so
    # openai is never dropped, and its stats must still say that its breaker is open.
    fake_llm.respond_with("openai", lambda request: HttpError(500, message="boom"))
    fake_llm.respond_with("anthropic", rank_by_score)
    stub = await judged_server(openai={"breaker": {"failure_threshold": 2, "cooldown_s": 60}})
    judges = [llm_judge("openai"), llm_judge("anthropic")]
    events = await run_job(stub, scored_spec(8, judges, batch_size=4, max_in_flight=1))

    done = completed(events)
    assert done.reason == rank_pb2.COMPLETION_REASON_SETTLED
    broken = judge_stats(done, "openai/any-name")
    assert broken.last_error.startswith("unavailable: circuit open")
    assert 0 < broken.failed_calls < 5, "kept in the job"
    assert broken.breaker_open
    progress = [e.tiers_updated.stats for e in events if e.HasField("tiers_updated")]
    for stats in [*progress, done.stats]:
        for judge in stats.judges:
            if judge.last_error.startswith("unavailable: circuit open"):
                assert judge.breaker_open, judge
    assert not judge_stats(done, "anthropic/any-name").breaker_open
