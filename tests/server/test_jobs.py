"""The job lifecycle over real gRPC: create, watch, get, list, cancel, rank."""

from __future__ import annotations

import asyncio
from itertools import pairwise

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from tierank.server.jobs.runner import MAX_CONSECUTIVE_FAILURES, TIERS_UPDATE_INTERVAL_S
from tierank.v1 import rank_pb2


async def _events(stub, name: str, after: int = 0) -> list[rank_pb2.JobEvent]:
    return [
        e async for e in stub.WatchJob(rank_pb2.WatchJobRequest(name=name, after_sequence=after))
    ]


def _flatten(tiers) -> list[str]:
    return [cid for tier in tiers for cid in tier.candidate_ids]


async def test_lexical_job_streams_to_a_settled_full_order(stub, make_spec):
    spec = make_spec(n=25, top_k=0)
    job = await stub.CreateJob(rank_pb2.CreateJobRequest(spec=spec, request_id="r1"))
    assert job.name.startswith("jobs/") and job.state in (
        rank_pb2.JOB_STATE_PENDING,
        rank_pb2.JOB_STATE_RUNNING,
    )
    events = await _events(stub, job.name)
    kinds = [e.WhichOneof("kind") for e in events]
    assert kinds[0] == "accepted" and kinds[-1] == "completed"
    assert "verdict" in kinds and "tiers_updated" in kinds
    assert [e.sequence for e in events] == list(range(1, len(events) + 1))
    completed = events[-1].completed
    assert completed.reason == rank_pb2.COMPLETION_REASON_SETTLED
    order = _flatten(completed.tiers)
    assert sorted(order) == sorted(c.id for c in spec.candidates)
    assert all(t.settled for t in completed.tiers)
    assert order[:6] == [f"c00{i}" for i in range(6)]
    stats = completed.stats
    assert stats.judge_calls > 0 and stats.critical_path >= 1
    assert stats.input_tokens > 0 and stats.judges[0].judge == "lexical"

    fetched = await stub.GetJob(rank_pb2.GetJobRequest(name=job.name, view=rank_pb2.JOB_VIEW_FULL))
    assert fetched.state == rank_pb2.JOB_STATE_SUCCEEDED
    assert fetched.completion_reason == rank_pb2.COMPLETION_REASON_SETTLED
    assert _flatten(fetched.tiers) == order
    assert fetched.spec == spec
    assert fetched.last_sequence == events[-1].sequence


async def test_tiers_are_listed_at_most_every_interval_and_always_at_the_end(
    stub, make_spec, oracle_judge
):
    # Fast judges and a big pool: many plans a second, each of which moves the tiers.
    judge = oracle_judge(noise=1.0, latency_ms="10")
    spec = make_spec(n=150, top_k=0, judges=[judge], max_in_flight=2)
    job = await stub.CreateJob(rank_pb2.CreateJobRequest(spec=spec))
    events = await _events(stub, job.name)
    verdicts = sum(1 for e in events if e.WhichOneof("kind") == "verdict")
    listed = [e for e in events if e.WhichOneof("kind") == "tiers_updated"]
    assert listed and len(listed) < verdicts / 4
    times = [e.time.ToNanoseconds() / 1e9 for e in listed]
    assert all(later - earlier >= TIERS_UPDATE_INTERVAL_S for earlier, later in pairwise(times))
    # The end lists the final tiers, however recently the last update was.
    assert events[-1].completed.tiers and _flatten(events[-1].completed.tiers)


async def test_request_id_makes_create_idempotent(stub, make_spec):
    spec = make_spec(n=10)
    first = await stub.CreateJob(rank_pb2.CreateJobRequest(spec=spec, request_id="same"))
    again = await stub.CreateJob(rank_pb2.CreateJobRequest(spec=spec, request_id="same"))
    other = await stub.CreateJob(rank_pb2.CreateJobRequest(spec=spec, request_id="other"))
    assert first.name == again.name != other.name
    listed = await stub.ListJobs(rank_pb2.ListJobsRequest())
    assert len(listed.jobs) == 2


async def test_list_pages_and_filters_by_state(stub, make_spec):
    names = []
    for i in range(5):
        job = await stub.CreateJob(
            rank_pb2.CreateJobRequest(spec=make_spec(n=8), request_id=f"p{i}")
        )
        names.append(job.name)
    for name in names:
        await _events(stub, name)
    seen, token = [], ""
    while True:
        page = await stub.ListJobs(rank_pb2.ListJobsRequest(page_size=2, page_token=token))
        assert len(page.jobs) <= 2
        seen += [j.name for j in page.jobs]
        token = page.next_page_token
        if not token:
            break
    assert seen == list(reversed(names)), "newest first, every job once"
    done = await stub.ListJobs(rank_pb2.ListJobsRequest(state=rank_pb2.JOB_STATE_SUCCEEDED))
    assert len(done.jobs) == 5
    running = await stub.ListJobs(rank_pb2.ListJobsRequest(state=rank_pb2.JOB_STATE_RUNNING))
    assert list(running.jobs) == []


async def test_many_watchers_and_resumed_watchers_see_the_same_gap_free_stream(
    stub, make_spec, oracle_judge
):
    spec = make_spec(n=40, top_k=0, judges=[oracle_judge(noise=0.3, latency_ms="5")])
    job = await stub.CreateJob(rank_pb2.CreateJobRequest(spec=spec))
    streams = await asyncio.gather(*(_events(stub, job.name) for _ in range(4)))
    full = streams[0]
    assert all(s == full for s in streams)
    cut = len(full) // 2
    resumed = await _events(stub, job.name, after=full[cut - 1].sequence)
    assert full[:cut] + resumed == full
    assert await _events(stub, job.name, after=full[-1].sequence) == [], "ends, never hangs"


async def test_watcher_that_disconnects_resumes_without_gaps_or_duplicates(
    stub, make_spec, oracle_judge
):
    spec = make_spec(n=40, top_k=0, judges=[oracle_judge(noise=0.3, latency_ms="10")])
    job = await stub.CreateJob(rank_pb2.CreateJobRequest(spec=spec))
    seen: list[rank_pb2.JobEvent] = []
    call = stub.WatchJob(rank_pb2.WatchJobRequest(name=job.name))
    async for event in call:
        seen.append(event)
        if len(seen) == 5:
            call.cancel()
            break
    seen += await _events(stub, job.name, after=seen[-1].sequence)
    assert [e.sequence for e in seen] == list(range(1, len(seen) + 1))
    assert seen[-1].WhichOneof("kind") == "completed"


async def test_cancel_stops_the_job_with_provisional_tiers(stub, make_spec, oracle_judge):
    spec = make_spec(n=60, top_k=0, judges=[oracle_judge(noise=0.5, latency_ms="50")])
    job = await stub.CreateJob(rank_pb2.CreateJobRequest(spec=spec))
    await asyncio.sleep(0.2)
    cancelled = await stub.CancelJob(rank_pb2.CancelJobRequest(name=job.name))
    assert cancelled.state == rank_pb2.JOB_STATE_CANCELLED
    assert cancelled.completion_reason == rank_pb2.COMPLETION_REASON_CANCELLED
    events = await _events(stub, job.name)
    assert events[-1].completed.reason == rank_pb2.COMPLETION_REASON_CANCELLED
    assert not all(t.settled for t in events[-1].completed.tiers)
    again = await stub.CancelJob(rank_pb2.CancelJobRequest(name=job.name))
    assert again.state == rank_pb2.JOB_STATE_CANCELLED


@pytest.mark.parametrize("ending", ["cancel", "deadline"])
async def test_an_early_end_keeps_the_answers_in_and_counts_the_rest_abandoned(
    stub, make_spec, oracle_judge, ending
):
    # Each first-wave batch goes to both judges; the fast one answers at once, the slow one
    # never in time, so no plan is ever whole and the runner holds the fast answers unrecorded.
    fast = oracle_judge(noise=0.0, model="fast", latency_ms="1")
    slow = oracle_judge(noise=0.0, model="slow", latency_ms="60000")
    spec = make_spec(
        n=20,
        top_k=0,
        judges=[fast, slow],
        ensemble_mode=rank_pb2.ENSEMBLE_MODE_ALL,
        deadline_seconds=1.0 if ending == "deadline" else 0.0,
    )
    job = await stub.CreateJob(rank_pb2.CreateJobRequest(spec=spec))
    if ending == "cancel":
        await asyncio.sleep(0.5)
        await stub.CancelJob(rank_pb2.CancelJobRequest(name=job.name))
    events = await _events(stub, job.name)
    completed = events[-1].completed
    expected_reason = {
        "cancel": rank_pb2.COMPLETION_REASON_CANCELLED,
        "deadline": rank_pb2.COMPLETION_REASON_DEADLINE_EXCEEDED,
    }[ending]
    assert completed.reason == expected_reason
    verdicts = [e.verdict for e in events if e.HasField("verdict")]
    assert sorted((v.judge, v.batch) for v in verdicts) == [("oracle/fast", 0), ("oracle/fast", 1)]
    assert all(v.ordering for v in verdicts)
    judges = {j.judge: j for j in completed.stats.judges}
    assert (judges["oracle/fast"].calls, judges["oracle/fast"].abandoned_calls) == (2, 0)
    assert (judges["oracle/slow"].calls, judges["oracle/slow"].abandoned_calls) == (0, 2)
    assert (completed.stats.judge_calls, completed.stats.abandoned_calls) == (2, 2)
    # The fast judge's votes are in the final tiers: each batch of 10 is ordered.
    order = _flatten(completed.tiers)
    assert order.index("c000") < order.index("c009") and order.index("c010") < order.index("c019")
    assert len(completed.tiers) > 1
    fetched = await stub.GetJob(rank_pb2.GetJobRequest(name=job.name))
    assert fetched.stats == completed.stats


async def test_rank_creates_and_streams_in_one_call(stub, make_spec):
    events = [e async for e in stub.Rank(rank_pb2.RankRequest(spec=make_spec(n=12, top_k=3)))]
    assert events[0].WhichOneof("kind") == "accepted"
    completed = events[-1].completed
    assert completed.reason == rank_pb2.COMPLETION_REASON_SETTLED
    assert _flatten(completed.tiers)[:3] == ["c000", "c001", "c002"]


async def test_budget_stops_cleanly_with_provisional_tiers(stub, make_spec, oracle_judge):
    spec = make_spec(
        n=50,
        top_k=0,
        judges=[oracle_judge(noise=0.2)],
        budget=rank_pb2.Budget(max_judge_calls=3),
        max_in_flight=8,
    )
    events = [e async for e in stub.Rank(rank_pb2.RankRequest(spec=spec))]
    completed = events[-1].completed
    assert completed.reason == rank_pb2.COMPLETION_REASON_BUDGET_EXHAUSTED
    assert completed.stats.judge_calls == 3
    assert sum(1 for e in events if e.HasField("verdict")) == 3
    assert not all(t.settled for t in completed.tiers)
    assert sorted(_flatten(completed.tiers)) == sorted(c.id for c in spec.candidates)


async def test_a_budget_too_small_for_the_pool_is_spent_on_its_head(stub, make_spec, oracle_judge):
    # Showing all 50 once takes 5 calls; 3 cannot also pay for a later round, so the first
    # wave covers the first-stage head (2 calls) and the last call sorts out its top 5.
    spec = make_spec(
        n=50,
        top_k=5,
        judges=[oracle_judge(noise=0.0)],
        budget=rank_pb2.Budget(max_judge_calls=3),
    )
    events = [e async for e in stub.Rank(rank_pb2.RankRequest(spec=spec))]
    completed = events[-1].completed
    assert completed.reason == rank_pb2.COMPLETION_REASON_BUDGET_EXHAUSTED
    verdicts = [e.verdict for e in events if e.HasField("verdict")]
    assert completed.stats.judge_calls == len(verdicts) == 3
    shown = {cid for verdict in verdicts for cid in verdict.presented}
    assert shown == {f"c{i:03d}" for i in range(20)}
    listed = _flatten(completed.tiers)
    # The judge ranks by the hidden score (c000 best), which the votes on the head reveal;
    # candidates never shown keep the input order among themselves.
    assert listed[:5] == ["c000", "c001", "c002", "c003", "c004"]
    never_shown = [cid for cid in listed if cid not in shown]
    assert never_shown == [f"c{i:03d}" for i in range(20, 50)]


async def test_a_failing_judge_leaves_the_job_to_the_others(stub, make_spec, oracle_judge):
    broken = oracle_judge(noise=0.0, fail_rate="1", model="broken")
    spec = make_spec(n=40, top_k=0, judges=[oracle_judge(noise=0.0), broken])
    events = [e async for e in stub.Rank(rank_pb2.RankRequest(spec=spec))]
    completed = events[-1].completed
    assert completed.reason == rank_pb2.COMPLETION_REASON_SETTLED
    assert _flatten(completed.tiers) == [f"c{i:03d}" for i in range(40)]
    failed = {j.judge: j for j in completed.stats.judges}["oracle/broken"]
    # Dropped from the job after MAX_CONSECUTIVE_FAILURES failures in a row; calls already
    # in flight then still land (and fail), but no new ones are made.
    max_in_flight = 8
    assert not failed.breaker_open, "dropped for failures in a row; no breaker opened"
    assert (
        MAX_CONSECUTIVE_FAILURES <= failed.failed_calls < MAX_CONSECUTIVE_FAILURES + max_in_flight
    )
    assert "unparseable" in failed.last_error
    assert all(not e.verdict.ordering for e in events if e.verdict.judge == "oracle/broken")


async def test_identical_lexical_job_is_served_from_the_verdict_cache(stub, make_spec):
    spec = make_spec(n=20, top_k=0, seed=7)
    first = [e async for e in stub.Rank(rank_pb2.RankRequest(spec=spec))]
    second = [e async for e in stub.Rank(rank_pb2.RankRequest(spec=spec))]
    assert not any(e.verdict.cached for e in first if e.HasField("verdict"))
    verdicts = [e.verdict for e in second if e.HasField("verdict")]
    assert verdicts and all(v.cached for v in verdicts)
    assert second[-1].completed.stats.judge_calls == 0
    assert second[-1].completed.tiers == first[-1].completed.tiers


async def test_health_and_reflection_are_served(server_address):
    async with grpc.aio.insecure_channel(server_address) as channel:
        health = health_pb2_grpc.HealthStub(channel)
        for service in ("", "tierank.v1.RankService"):
            reply = await health.Check(health_pb2.HealthCheckRequest(service=service))
            assert reply.status == health_pb2.HealthCheckResponse.SERVING
        reflect = reflection_pb2_grpc.ServerReflectionStub(channel)
        request = reflection_pb2.ServerReflectionRequest(list_services="")
        async for reply in reflect.ServerReflectionInfo(iter([request])):
            names = {s.name for s in reply.list_services_response.service}
            assert "tierank.v1.RankService" in names
            break


@pytest.mark.parametrize("deadline", [0.05])
async def test_client_deadline_ends_the_watch_not_the_job(stub, make_spec, oracle_judge, deadline):
    spec = make_spec(n=30, top_k=0, judges=[oracle_judge(noise=0.3, latency_ms="30")])
    job = await stub.CreateJob(rank_pb2.CreateJobRequest(spec=spec))
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        async for _ in stub.WatchJob(rank_pb2.WatchJobRequest(name=job.name), timeout=deadline):
            pass
    assert caught.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    events = await _events(stub, job.name)
    assert events[-1].completed.reason == rank_pb2.COMPLETION_REASON_SETTLED


async def test_every_verdict_can_be_read_back_for_audit(stub, make_spec):
    events = [e async for e in stub.Rank(rank_pb2.RankRequest(spec=make_spec(n=12)))]
    verdicts = [e.verdict for e in events if e.HasField("verdict")]
    assert verdicts
    for verdict in verdicts:
        name = f"{events[0].job}/verdicts/{verdict.call_id}"
        record = await stub.GetVerdict(rank_pb2.GetVerdictRequest(name=name))
        assert record.verdict == verdict
        assert record.prompt == ""  # the offline judge renders no prompt
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await stub.GetVerdict(rank_pb2.GetVerdictRequest(name=f"{events[0].job}/verdicts/b999.j0"))
    assert caught.value.code() == grpc.StatusCode.NOT_FOUND


async def test_settling_waits_for_every_judge_call_in_flight(stub, make_spec, oracle_judge):
    fast = oracle_judge(noise=0.0, model="fast")
    slow = oracle_judge(noise=0.0, model="slow", latency_ms="150")
    spec = make_spec(n=30, top_k=5, judges=[fast, slow], max_in_flight=10)
    events = [e async for e in stub.Rank(rank_pb2.RankRequest(spec=spec))]
    batches_by_judge: dict[str, set[int]] = {}
    for event in events:
        if event.HasField("verdict"):
            batches_by_judge.setdefault(event.verdict.judge, set()).add(event.verdict.batch)
    # In "all" mode both judges see every batch; none of the slow judge's paid answers is
    # dropped because the fast one settled the target first.
    assert batches_by_judge["oracle/fast"] == batches_by_judge["oracle/slow"]
    judges = {j.judge: j for j in events[-1].completed.stats.judges}
    assert judges["oracle/fast"].calls == judges["oracle/slow"].calls
    assert events[-1].completed.reason == rank_pb2.COMPLETION_REASON_SETTLED


async def test_same_seed_and_answers_give_the_same_job_whatever_the_timing(
    stub, make_spec, oracle_judge
):
    """Answers are recorded in plan order, so judge latency cannot change the outcome."""
    outcomes = []
    for latency in ("0", "7", "25"):
        judges = [
            oracle_judge(noise=0.8, model="a", latency_ms=latency),
            oracle_judge(noise=0.8, model="b"),
        ]
        spec = make_spec(n=40, top_k=10, judges=judges, seed=11)
        events = [e async for e in stub.Rank(rank_pb2.RankRequest(spec=spec))]
        verdicts = [
            (e.verdict.call_id, tuple(e.verdict.ordering)) for e in events if e.verdict.call_id
        ]
        outcomes.append((verdicts, list(events[-1].completed.tiers)))
    assert outcomes[0] == outcomes[1] == outcomes[2]
