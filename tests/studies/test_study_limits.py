"""A study's budget and deadline: shared out over its queries and never overshot; the queries
that get nothing are reported as not judged, and the report still comes out."""

from __future__ import annotations

from collections.abc import AsyncIterator

import grpc
import pytest
from study_calls import (
    Stubs,
    paid_calls,
    started_study,
    study_jobs,
    study_queries,
    until_final,
)
from study_data import collection, inputs_request, oracle_ranking

from tierank.v1 import rank_pb2, study_pb2

QUERIES = 6
NOT_STARTED = rank_pb2.JOB_STATE_CANCELLED


@pytest.fixture
async def stubs(server_address: str) -> AsyncIterator[Stubs]:
    async with grpc.aio.insecure_channel(server_address) as channel:
        yield Stubs.on(channel)


def _spec(budget: rank_pb2.Budget | None = None, **fields: object) -> study_pb2.StudySpec:
    ranking = oracle_ranking(noise=0.5, top_k=5, batch_size=4, max_in_flight=3)
    return study_pb2.StudySpec(
        depth=5, ranking=ranking, max_live_queries=2, budget=budget, **fields
    )


async def _unbounded_calls(stubs: Stubs) -> int:
    """What the study's queries cost with no budget (the same collection and ranking)."""
    data = collection(queries=QUERIES)
    study = await started_study(stubs, _spec(), inputs_request("", data))
    ended = await until_final(stubs, study.name)
    assert ended.state == study_pb2.STUDY_STATE_SUCCEEDED
    return ended.progress.judge_calls


async def _ended_with(
    stubs: Stubs, spec: study_pb2.StudySpec
) -> tuple[study_pb2.Study, list[study_pb2.StudyQuery], int]:
    """The ended study, its queries and the calls its jobs and its queries' pointwise probes
    made (each counted once)."""
    data = collection(queries=QUERIES)
    study = await started_study(stubs, spec, inputs_request("", data))
    ended = await until_final(stubs, study.name)
    queries = await study_queries(stubs, study.name)
    jobs = await study_jobs(stubs, study.name)
    calls = sum([await paid_calls(stubs, job.name) for job in jobs])
    return ended, queries, calls + sum(query.pointwise_calls for query in queries)


@pytest.mark.parametrize("calls", [4, 9])
async def test_a_budget_of_calls_is_never_overshot_and_the_rest_is_not_judged(
    stubs: Stubs, calls: int
):
    needed = await _unbounded_calls(stubs)
    assert needed > calls + QUERIES, "the budget must be too small for the study"
    ended, queries, spent = await _ended_with(stubs, _spec(rank_pb2.Budget(max_judge_calls=calls)))
    assert ended.state == study_pb2.STUDY_STATE_SUCCEEDED, ended.error
    progress = ended.progress
    assert spent <= calls and progress.judge_calls == spent
    assert (progress.pending, progress.running, progress.failed) == (0, 0, 0)
    assert progress.settled + progress.provisional == QUERIES
    assert progress.provisional >= 1
    not_judged = [q for q in queries if not q.job]
    assert all(
        (q.state, q.completion_reason, q.judge_calls)
        == (NOT_STARTED, rank_pb2.COMPLETION_REASON_BUDGET_EXHAUSTED, 0)
        for q in not_judged
    ), not_judged
    judged = [q.query_id for q in queries if q.job]
    # Queries start in topic order: what the budget cannot pay for is the last queries.
    assert judged == [q.query_id for q in queries[: len(judged)]]
    assert len(judged) == min(calls, QUERIES)
    report = await stubs.studies.GetStudyReport(study_pb2.GetStudyReportRequest(name=ended.name))
    assert report.state == study_pb2.STUDY_STATE_SUCCEEDED and not report.complete
    assert report.cost.judge_calls == spent
    assert {s.system for s in report.systems} == {"good", "fair", "poor"}


async def test_a_budget_of_input_tokens_is_never_overshot(stubs: Stubs):
    needed = await _unbounded_calls(stubs)
    one_call = await _ended_with(stubs, _spec(rank_pb2.Budget(max_judge_calls=1)))
    tokens_per_call = one_call[0].progress.usage.input_tokens
    assert tokens_per_call > 0
    budget = tokens_per_call * (needed // 3)
    ended, _, _ = await _ended_with(stubs, _spec(rank_pb2.Budget(max_input_tokens=budget)))
    assert ended.state == study_pb2.STUDY_STATE_SUCCEEDED, ended.error
    assert 0 < ended.progress.usage.input_tokens <= budget
    assert ended.progress.judge_calls < needed
    assert ended.progress.pending == ended.progress.running == 0


async def test_a_deadline_ends_the_study_with_the_rest_not_judged(stubs: Stubs):
    ranking = oracle_ranking(noise=0.5, latency_ms=250, top_k=5, batch_size=4, max_in_flight=1)
    spec = study_pb2.StudySpec(depth=5, ranking=ranking, max_live_queries=2, deadline_seconds=0.6)
    data = collection(queries=QUERIES)
    study = await started_study(stubs, spec, inputs_request("", data))
    ended = await until_final(stubs, study.name, timeout=15)
    queries = await study_queries(stubs, study.name)
    assert ended.state == study_pb2.STUDY_STATE_SUCCEEDED, ended.error
    wall = ended.end_time.ToDatetime() - ended.start_time.ToDatetime()
    assert wall.total_seconds() < 0.6 + 3, "the deadline ended it"
    progress = ended.progress
    assert (progress.pending, progress.running, progress.settled) == (0, 0, 0), progress
    assert progress.provisional == QUERIES
    reasons = {q.completion_reason for q in queries}
    assert reasons == {rank_pb2.COMPLETION_REASON_DEADLINE_EXCEEDED}, queries
    assert [q for q in queries if not q.job], "queries past the deadline are never started"
    report = await stubs.studies.GetStudyReport(study_pb2.GetStudyReportRequest(name=study.name))
    assert not report.complete and report.progress == progress
