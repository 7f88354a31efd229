"""A study through the real StudyService on loopback: created, fed in chunks, started, judged
query by query as jobs, and reported on."""

from __future__ import annotations

import anyio
import grpc
import pytest
from study_data import collection, inputs_request, oracle_ranking

from tierank.v1 import study_pb2, study_pb2_grpc

FINAL = {
    study_pb2.STUDY_STATE_SUCCEEDED,
    study_pb2.STUDY_STATE_FAILED,
    study_pb2.STUDY_STATE_CANCELLED,
}


async def until_final(
    stub: study_pb2_grpc.StudyServiceStub, name: str, timeout: float = 60
) -> study_pb2.Study:
    with anyio.fail_after(timeout):
        while True:
            study = await stub.GetStudy(study_pb2.GetStudyRequest(name=name))
            if study.state in FINAL:
                return study
            await anyio.sleep(0.1)


async def test_a_study_judges_every_query_and_ranks_the_systems(
    studies: study_pb2_grpc.StudyServiceStub,
) -> None:
    data = collection()
    ranking = oracle_ranking(noise=0.3, top_k=10)
    spec = study_pb2.StudySpec(depth=10, ranking=ranking, max_live_queries=2)
    study = await studies.CreateStudy(study_pb2.CreateStudyRequest(spec=spec, request_id="s1"))
    assert study.state == study_pb2.STUDY_STATE_DRAFT
    added = await studies.AddStudyInputs(inputs_request(study.name, data, human=True))
    assert added.added and added.study.inputs.topics == len(data.topics)
    again = await studies.AddStudyInputs(inputs_request(study.name, data, human=True))
    assert not again.added and again.study.inputs.chunks == 1

    started = await studies.StartStudy(study_pb2.StartStudyRequest(name=study.name))
    assert started.state == study_pb2.STUDY_STATE_RUNNING
    assert started.progress.queries == len(data.topics)
    ended = await until_final(studies, study.name)

    assert ended.state == study_pb2.STUDY_STATE_SUCCEEDED, ended.error
    assert ended.progress.settled + ended.progress.provisional == len(data.topics)
    assert ended.progress.judge_calls > 0
    report = await studies.GetStudyReport(study_pb2.GetStudyReportRequest(name=study.name))
    assert list(report.ranking) == ["good", "fair", "poor"]
    assert report.complete == (ended.progress.settled == len(data.topics))
    assert report.agreement.kendall_tau == pytest.approx(1.0)
    ndcg = {s.system: next(m for m in s.measures if m.measure == "nDCG@10") for s in report.systems}
    assert ndcg["good"].low <= ndcg["good"].mean <= ndcg["good"].high
    queries = await studies.ListStudyQueries(study_pb2.ListStudyQueriesRequest(name=study.name))
    assert [q.query_id for q in queries.queries] == list(data.topics)
    assert all(q.job.startswith("jobs/") and q.measures for q in queries.queries)
    qrels = await studies.ExportStudyQrels(study_pb2.ExportStudyQrelsRequest(name=study.name))
    assert {line.split()[0] for line in qrels.qrels.splitlines()} == set(data.topics)


async def test_another_tenant_and_bad_names_are_refused(
    studies: study_pb2_grpc.StudyServiceStub,
) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as missing:
        await studies.GetStudy(study_pb2.GetStudyRequest(name="studies/nope"))
    assert missing.value.code() == grpc.StatusCode.NOT_FOUND
    with pytest.raises(grpc.aio.AioRpcError) as bad:
        await studies.GetStudy(study_pb2.GetStudyRequest(name="jobs/x"))
    assert bad.value.code() == grpc.StatusCode.INVALID_ARGUMENT
