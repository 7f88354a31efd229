"""Adding a system to a study that has ended (AddStudyInputs, then ExtendStudy), through gRPC:
only the documents its run adds to the pools are judged, each grown query's new job starting
from every verdict its previous job holds (none asked or paid for again), the report says how
much of each system's top-10 was judged before and after, and bad or mistimed extensions are
refused with what is wrong."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import anyio
import grpc
import pytest
from study_calls import (
    Stubs,
    job_events,
    paid_calls,
    started_study,
    study_jobs,
    study_queries,
    until_final,
    until_study,
)
from study_data import (
    RANK_BANDS,
    Collection,
    collection,
    inputs_request,
    oracle_ranking,
    run_request,
    without,
)

from tierank.client._errors import error_from_rpc
from tierank.server.storage.sqlite.studies import SqliteStudies
from tierank.v1 import rank_pb2, study_pb2

DEPTH = 10
QUERIES = 5


@pytest.fixture
async def stubs(server_address: str) -> AsyncIterator[Stubs]:
    async with grpc.aio.insecure_channel(server_address) as channel:
        yield Stubs.on(channel)


def _spec(**fields: object) -> study_pb2.StudySpec:
    return study_pb2.StudySpec(
        # Noise breaks the grades' ties at random: without it they would fall in shown order,
        # which the server rightly calls position bias.
        depth=DEPTH,
        ranking=oracle_ranking(noise=0.3, top_k=10, batch_size=5),
        # The subject is the tournaments' verdicts, counted call by call.
        labels=RANK_BANDS,
        **fields,
    )  # type: ignore[arg-type]


def _top(scores: dict[str, float], depth: int) -> list[str]:
    """trec_eval's order: score descending, then document id descending."""
    return sorted(scores, key=lambda doc: (scores[doc], doc), reverse=True)[:depth]


def _pools(data: Collection, systems: list[str]) -> dict[str, set[str]]:
    return {
        qid: {doc for system in systems for doc in _top(data.runs[system][qid], DEPTH)}
        for qid in data.topics
    }


async def _extend(stubs: Stubs, name: str, **fields: object) -> study_pb2.Study:
    return await stubs.studies.ExtendStudy(study_pb2.ExtendStudyRequest(name=name, **fields))  # type: ignore[arg-type]


async def _refusal(call) -> grpc.aio.AioRpcError:
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await call
    return refused.value


def _violations(error: grpc.aio.AioRpcError) -> dict[str, str]:
    return {v.field: v.description for v in error_from_rpc(error).field_violations}


def _reason(error: grpc.aio.AioRpcError) -> str:
    info = error_from_rpc(error).error_info
    return info.reason if info else ""


async def test_an_added_run_judges_only_its_holes_and_reuses_every_verdict(stubs: Stubs):
    data = collection(queries=QUERIES, docs=30)
    study = await started_study(stubs, _spec(), inputs_request("", without(data, "poor")))
    first = await until_final(stubs, study.name)
    assert first.state == study_pb2.STUDY_STATE_SUCCEEDED
    assert [(r.round, list(r.systems)) for r in first.inputs.rounds] == [(0, ["fair", "good"])]
    first_jobs = {job.name: job for job in await study_jobs(stubs, study.name)}
    first_calls = first.progress.judge_calls
    assert first_calls == sum([await paid_calls(stubs, name) for name in first_jobs])

    added = await stubs.studies.AddStudyInputs(run_request(study.name, data, "poor", "poor-1"))
    assert added.added and added.study.state == study_pb2.STUDY_STATE_SUCCEEDED
    assert added.study.inputs.systems == ["fair", "good", "poor"]
    extended = await _extend(stubs, study.name, request_id="add-poor")
    assert extended.state == study_pb2.STUDY_STATE_RUNNING
    final = await until_final(stubs, study.name)
    assert final.state == study_pb2.STUDY_STATE_SUCCEEDED

    # The holes, worked out here from the runs: poor's top-d less what good and fair pooled.
    before = _pools(data, ["fair", "good"])
    holes = {qid: set(_top(data.runs["poor"][qid], DEPTH)) - before[qid] for qid in data.topics}
    grown = sorted(qid for qid, docs in holes.items() if docs)
    assert grown, "the poor system must add documents for this test to mean anything"
    study_round = final.inputs.rounds[1]
    assert (study_round.round, list(study_round.systems)) == (1, ["poor"])
    assert study_round.request_id == "add-poor"
    assert study_round.queries_extended == len(grown)
    assert study_round.documents_added == sum(len(docs) for docs in holes.values())
    after = _pools(data, ["fair", "good", "poor"])
    assert final.progress.pooled_documents == sum(len(docs) for docs in after.values())
    assert final.progress.queries == QUERIES and final.progress.settled == QUERIES

    # Each grown query has a new job over its whole new pool that continues its old one.
    queries = {q.query_id: q for q in await study_queries(stubs, study.name)}
    new_calls = 0
    for qid in grown:
        job = await stubs.rank.GetJob(rank_pb2.GetJobRequest(name=queries[qid].job))
        assert job.name not in first_jobs, f"{qid} was not judged again"
        previous = next(
            j for j in first_jobs.values() if j.request_id == job.request_id.split("-after-")[0]
        )
        assert job.request_id.endswith(f"-after-{previous.name.removeprefix('jobs/')}")
        assert {c.id for c in job.spec.candidates} == after[qid]
        old_job = await stubs.rank.GetJob(
            rank_pb2.GetJobRequest(name=previous.name, view=rank_pb2.JOB_VIEW_FULL)
        )
        events = await job_events(stubs, job.name)
        asked = [e.verdict for e in events if e.HasField("verdict")]
        old_ids = {
            e.verdict.call_id
            for e in await job_events(stubs, previous.name)
            if e.HasField("verdict")
        }
        # Only new calls are made, each showing at least one added document...
        assert asked and not {v.call_id for v in asked} & old_ids
        for verdict in asked:
            assert set(verdict.presented) & holes[qid], verdict
        # ...and the job's stats count the reused calls with them (once each).
        full = await stubs.rank.GetJob(
            rank_pb2.GetJobRequest(name=job.name, view=rank_pb2.JOB_VIEW_FULL)
        )
        assert full.stats.judge_calls == old_job.stats.judge_calls + len(asked)
        new_calls += len(asked)
        # Its tiers place every document of the new pool, the reused ones included.
        assert {c for t in full.tiers for c in t.candidate_ids} == after[qid]
    for qid in sorted(set(data.topics) - set(grown)):
        assert queries[qid].job in first_jobs, f"{qid} gained nothing and keeps its job"
    assert final.progress.judge_calls == first_calls + new_calls

    # The same pools judged from scratch cost more than the extension did.
    fresh = await started_study(stubs, _spec(), inputs_request("", data))
    fresh = await until_final(stubs, fresh.name)
    assert new_calls < fresh.progress.judge_calls - first_calls

    report = await stubs.studies.GetStudyReport(study_pb2.GetStudyReportRequest(name=study.name))
    assert set(report.ranking) == {"good", "fair", "poor"}
    judged = {j.system: j for j in report.judged}
    assert set(judged) == {"good", "fair", "poor"}
    expected_before = sum(
        len(set(_top(data.runs["poor"][qid], 10)) & before[qid]) / 10 for qid in data.topics
    ) / len(data.topics)
    assert judged["poor"].round == 1
    assert judged["poor"].before == pytest.approx(expected_before)
    assert judged["poor"].before < 1.0 and judged["poor"].after == pytest.approx(1.0)
    assert not judged["good"].HasField("before") and judged["good"].after == pytest.approx(1.0)
    qrels = await stubs.studies.ExportStudyQrels(study_pb2.ExportStudyQrelsRequest(name=study.name))
    labelled = {(line.split()[0], line.split()[2]) for line in qrels.qrels.splitlines()}
    assert labelled == {(qid, doc) for qid, docs in after.items() for doc in docs}

    # The same request_id again answers with the study as it is; another finds nothing to add.
    assert (await _extend(stubs, study.name, request_id="add-poor")).inputs == final.inputs
    refused = await _refusal(_extend(stubs, study.name, request_id="again"))
    assert refused.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert _reason(refused) == "NO_ADDED_RUN"


async def test_what_an_ended_study_refuses_to_take_or_to_extend_with(stubs: Stubs):
    data = collection(queries=3, docs=12, seed=11)
    draft = await stubs.studies.CreateStudy(study_pb2.CreateStudyRequest(spec=_spec()))
    refused = await _refusal(_extend(stubs, draft.name))
    assert refused.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert _reason(refused) == "STUDY_NOT_STARTED"
    refused = await _refusal(_extend(stubs, draft.name, deadline_seconds=1e308))
    assert refused.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "2,592,000" in _violations(refused)["deadline_seconds"]

    study = await started_study(stubs, _spec(), inputs_request("", without(data, "poor")))
    await until_final(stubs, study.name)
    # A system already pooled, topics and human qrels: each named.
    again = run_request(study.name, data, "good", "good-again")
    again.topics.add(query_id="q9", text="a new topic")
    again.human_qrels.add(query_id="q0", doc_id="q0-d1", grade=2)
    refused = await _refusal(stubs.studies.AddStudyInputs(again))
    assert refused.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert set(_violations(refused)) == {"runs[0].system", "topics", "human_qrels"}
    # A resent chunk of the study's start is answered as the first time.
    resent = await stubs.studies.AddStudyInputs(inputs_request(study.name, without(data, "poor")))
    assert not resent.added

    # A new run reaching a query without a topic, and documents without passages.
    stray = run_request(study.name, data, "poor", "poor-stray")
    stray.runs[0].entries.add(query_id="q77", doc_id="q77-d0", score=9.0)
    stray.runs[0].entries.add(query_id="q0", doc_id="unseen-doc", score=99.0)
    assert (await stubs.studies.AddStudyInputs(stray)).added
    refused = await _refusal(_extend(stubs, study.name))
    assert refused.code() == grpc.StatusCode.INVALID_ARGUMENT
    violations = _violations(refused)
    assert "q77" in violations["runs"] and "unseen-doc" in violations["passages"]
    ended = await stubs.studies.GetStudy(study_pb2.GetStudyRequest(name=study.name))
    assert ended.state == study_pb2.STUDY_STATE_SUCCEEDED and len(ended.inputs.rounds) == 1

    # Naming the systems to pool leaves a wrongly sent run out (and names the unknown).
    refused = await _refusal(_extend(stubs, study.name, systems=["good", "nobody"]))
    assert set(_violations(refused)) == {"systems[0]", "systems[1]"}
    assert "pooled already" in _violations(refused)["systems[0]"]
    fixed = run_request(study.name, data, "poor", "poor-fixed")
    fixed.runs[0].system = "poor2"
    assert (await stubs.studies.AddStudyInputs(fixed)).added
    extended = await _extend(stubs, study.name, systems=["poor2"])
    assert list(extended.inputs.rounds[1].systems) == ["poor2"]
    final = await until_final(stubs, study.name)
    report = await stubs.studies.GetStudyReport(study_pb2.GetStudyReportRequest(name=study.name))
    assert set(report.ranking) == {"good", "fair", "poor2"}, "the stray run is in no report"
    assert final.state == study_pb2.STUDY_STATE_SUCCEEDED

    # Bad limits are named.
    refused = await _refusal(
        _extend(
            stubs,
            study.name,
            budget=rank_pb2.Budget(max_judge_calls=-1),
            deadline_seconds=float("nan"),
        )
    )
    assert set(_violations(refused)) == {"budget.max_judge_calls", "deadline_seconds"}


async def test_an_extension_within_a_budget_keeps_the_labels_it_cannot_pay_to_renew(
    stubs: Stubs,
):
    data = collection(queries=4, docs=20, seed=5)
    study = await started_study(stubs, _spec(), inputs_request("", without(data, "poor")))
    first = await until_final(stubs, study.name)
    first_queries = {q.query_id: q for q in await study_queries(stubs, study.name)}
    await stubs.studies.AddStudyInputs(run_request(study.name, data, "poor", "poor"))
    extended = await _extend(stubs, study.name, budget=rank_pb2.Budget(max_judge_calls=1))
    assert extended.spec.budget.max_judge_calls == first.progress.judge_calls + 1
    final = await until_final(stubs, study.name)
    # One more call at most, the study's budget never overshot.
    assert final.progress.judge_calls <= first.progress.judge_calls + 1
    queries = await study_queries(stubs, study.name)
    unpaid = [
        q
        for q in queries
        if q.completion_reason == rank_pb2.COMPLETION_REASON_BUDGET_EXHAUSTED
        and q.job == first_queries[q.query_id].job
    ]
    assert unpaid, "the budget leaves some grown query unjudged"
    # Such a query keeps the labels of its previous job.
    qrels = await stubs.studies.ExportStudyQrels(study_pb2.ExportStudyQrelsRequest(name=study.name))
    labelled = {line.split()[0] for line in qrels.qrels.splitlines()}
    assert {q.query_id for q in unpaid} <= labelled


async def test_a_running_study_takes_no_inputs(stubs: Stubs):
    data = collection(queries=4, docs=15, seed=3)
    ranking = oracle_ranking(latency_ms=300, top_k=5, batch_size=4, max_in_flight=1)
    spec = study_pb2.StudySpec(depth=5, ranking=ranking, max_live_queries=1)
    study = await started_study(stubs, spec, inputs_request("", without(data, "poor")))
    await until_study(stubs, study.name, lambda s: s.progress.running == 1)
    refused = await _refusal(
        stubs.studies.AddStudyInputs(run_request(study.name, data, "poor", "poor"))
    )
    assert refused.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert _reason(refused) == "STUDY_RUNNING"
    refused = await _refusal(_extend(stubs, study.name, request_id="another"))
    assert _reason(refused) == "STUDY_RUNNING"
    assert "its first round" in refused.details()
    assert error_from_rpc(refused).error_info.metadata == {"round": "0"}
    await stubs.studies.CancelStudy(study_pb2.CancelStudyRequest(name=study.name))


async def test_a_second_extension_is_refused_naming_the_round_the_first_one_started(
    stubs: Stubs, monkeypatch: pytest.MonkeyPatch
):
    """Two ExtendStudy calls (other request_ids) that both find the study ended: the one
    stored first starts its round, the other is told that round runs rather than answered as
    if it were its own; a retry of the first gets the study as it is."""
    data = collection(queries=3, docs=12, seed=11)
    study = await started_study(stubs, _spec(), inputs_request("", without(data, "poor")))
    await until_final(stubs, study.name)
    await stubs.studies.AddStudyInputs(run_request(study.name, data, "poor", "poor"))
    # Both calls are let through to storage together, once each has planned its round.
    planned = 0
    both_planned = anyio.Event()
    extend_study = SqliteStudies.extend_study

    async def extend_together(self: SqliteStudies, *args: Any, **kwargs: Any) -> bool:
        nonlocal planned
        planned += 1
        if planned == 2:
            both_planned.set()
        with anyio.fail_after(30):
            await both_planned.wait()
        return await extend_study(self, *args, **kwargs)

    monkeypatch.setattr(SqliteStudies, "extend_study", extend_together)
    answers = await asyncio.gather(
        _extend(stubs, study.name, request_id="first"),
        _extend(stubs, study.name, request_id="second"),
        return_exceptions=True,
    )
    extended = [a for a in answers if isinstance(a, study_pb2.Study)]
    refused = [a for a in answers if isinstance(a, grpc.aio.AioRpcError)]
    assert len(extended) == len(refused) == 1, answers
    winner = ["first", "second"][answers.index(extended[0])]
    assert [r.request_id for r in extended[0].inputs.rounds] == ["", winner]
    assert refused[0].code() == grpc.StatusCode.FAILED_PRECONDITION
    assert _reason(refused[0]) == "STUDY_RUNNING"
    assert f"round 1 (ExtendStudy request_id '{winner}', pooling poor)" in refused[0].details()
    assert error_from_rpc(refused[0]).error_info.metadata == {"round": "1", "request_id": winner}
    # The winner's retry: the study as it is, its one round.
    again = await _extend(stubs, study.name, request_id=winner)
    assert [r.request_id for r in again.inputs.rounds] == ["", winner]
    final = await until_final(stubs, study.name)
    assert final.state == study_pb2.STUDY_STATE_SUCCEEDED
    assert [r.request_id for r in final.inputs.rounds] == ["", winner]
