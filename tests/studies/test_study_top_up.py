"""A study's budget left over once every query has had its share goes to the queries their
shares left provisional, those with the most candidates still open first, each judged on by a
job that continues its previous one: the budget is spent, never overshot, and no call is asked
twice."""

from __future__ import annotations

from collections.abc import AsyncIterator

import grpc
import pytest
from study_calls import Stubs, job_events, started_study, study_jobs, study_queries, until_final
from study_data import RANK_BANDS

from tierank.v1 import rank_pb2, study_pb2

BUDGET = 8
HARD, EASY = ["q0", "q1", "q2", "q3"], ["q4", "q5"]


@pytest.fixture
async def stubs(server_address: str) -> AsyncIterator[Stubs]:
    async with grpc.aio.insecure_channel(server_address) as channel:
        yield Stubs.on(channel)


def _inputs() -> study_pb2.AddStudyInputsRequest:
    """Four queries of 12 documents, then two of one document each (they settle with no call,
    leaving their shares over)."""
    request = study_pb2.AddStudyInputsRequest(request_id="all")
    run = request.runs.add(system="only")
    for qid in HARD + EASY:
        request.topics.add(query_id=qid, text=f"topic {qid}")
        for d in range(12 if qid in HARD else 1):
            doc = f"{qid}-d{d}"
            run.entries.add(query_id=qid, doc_id=doc, score=-d)
            request.passages.add(doc_id=doc, text=f"passage {doc}", metadata={"score": str(d)})
    return request


def _full(name: str) -> rank_pb2.GetJobRequest:
    return rank_pb2.GetJobRequest(name=name, view=rank_pb2.JOB_VIEW_FULL)


async def _own_calls(stubs: Stubs, job: str) -> set[str]:
    return {e.verdict.call_id for e in await job_events(stubs, job) if e.HasField("verdict")}


async def test_leftover_budget_goes_to_the_provisional_queries(stubs: Stubs):
    judge = rank_pb2.JudgeSpec(
        provider="oracle", parameters=rank_pb2.JudgeParameters(options={"noise": "0.3"})
    )
    spec = study_pb2.StudySpec(
        depth=12,
        ranking=rank_pb2.JobSpec(judges=[judge], top_k=5, batch_size=4, max_in_flight=1),
        max_live_queries=1,
        budget=rank_pb2.Budget(max_judge_calls=BUDGET),
        # The subject is the jobs' calls, counted call by call.
        labels=RANK_BANDS,
    )
    study = await started_study(stubs, spec, _inputs())
    ended = await until_final(stubs, study.name)
    assert ended.state == study_pb2.STUDY_STATE_SUCCEEDED
    assert ended.progress.judge_calls <= BUDGET, "never overshot"

    jobs = {job.name: job for job in await study_jobs(stubs, study.name)}
    continuing = [job for job in jobs.values() if "-after-" in job.request_id]
    assert continuing, "the leftover was spent on queries judged on"
    calls_made = 0
    for job in jobs.values():
        own = await _own_calls(stubs, job.name)
        calls_made += len(own)
        if job in continuing:
            previous = "jobs/" + job.request_id.rpartition("-after-")[2]
            assert not own & await _own_calls(stubs, previous), "no call asked twice"
            pools = [
                [c.id for c in (await stubs.rank.GetJob(_full(name))).spec.candidates]
                for name in (job.name, previous)
            ]
            assert pools[0] == pools[1] and len(pools[0]) == 12, "the same pool, judged on"
    # Every call counted once: the study's total is what its jobs asked, and more than the
    # shares alone spent (the top-up used the leftover).
    assert ended.progress.judge_calls == calls_made
    queries = {q.query_id: q for q in await study_queries(stubs, study.name)}
    first_pass = 0
    for name in set(jobs) - {job.name for job in continuing}:
        first_pass += len(await _own_calls(stubs, name))
    assert calls_made > first_pass
    assert {q.query_id for q in queries.values() if q.job in {j.name for j in continuing}} <= set(
        HARD
    ), "only queries cut short are topped up"
