"""Cancelling a study: its live jobs are cancelled, no job starts after it, the draft or the
ended study stays as it is, and starting it afterwards does nothing."""

from __future__ import annotations

from collections.abc import AsyncIterator

import anyio
import grpc
import pytest
from study_calls import (
    ENDED_JOB_STATES,
    Stubs,
    started_study,
    study_jobs,
    study_queries,
    until_study,
)
from study_data import collection, inputs_request, oracle_ranking

from tierank.v1 import rank_pb2, study_pb2

QUERIES = 6
# Several driver passes: time enough for a driver that still started jobs to start one.
AFTERWARDS_S = 1.5


@pytest.fixture
async def stubs(server_address: str) -> AsyncIterator[Stubs]:
    async with grpc.aio.insecure_channel(server_address) as channel:
        yield Stubs.on(channel)


def _slow_spec() -> study_pb2.StudySpec:
    # Each query needs at least four calls one after another (15 documents, 4 a call, one
    # call at a time): well over a second, so no job ends on its own during the test.
    ranking = oracle_ranking(noise=0.5, latency_ms=300, top_k=5, batch_size=4, max_in_flight=1)
    return study_pb2.StudySpec(depth=5, ranking=ranking, max_live_queries=2)


async def test_cancel_during_a_run_cancels_the_live_jobs_and_starts_no_other(stubs: Stubs):
    data = collection(queries=QUERIES)
    study = await started_study(stubs, _slow_spec(), inputs_request("", data))
    await until_study(stubs, study.name, lambda s: s.progress.running == 2, poll_s=0.02)
    with anyio.fail_after(10):
        cancelled = await stubs.studies.CancelStudy(study_pb2.CancelStudyRequest(name=study.name))
    assert cancelled.state == study_pb2.STUDY_STATE_CANCELLED
    jobs = await study_jobs(stubs, study.name)
    assert sorted(job.request_id.rpartition("-q")[2] for job in jobs) == ["1", "2"]
    assert {job.state for job in jobs} == {rank_pb2.JOB_STATE_CANCELLED}

    await anyio.sleep(AFTERWARDS_S)
    assert [job.name for job in await study_jobs(stubs, study.name)] == [j.name for j in jobs]
    again = await stubs.studies.StartStudy(study_pb2.StartStudyRequest(name=study.name))
    assert again.state == study_pb2.STUDY_STATE_CANCELLED
    await anyio.sleep(AFTERWARDS_S)
    assert len(await study_jobs(stubs, study.name)) == 2
    ended = await stubs.studies.GetStudy(study_pb2.GetStudyRequest(name=study.name))
    assert ended == again
    progress = ended.progress
    # The queries never started end cancelled too, without a job: nothing is left pending
    # (an extension of the study judges only what it adds).
    assert progress.running == 0 and progress.pending == 0
    assert progress.provisional == QUERIES
    assert progress.eta_seconds == 0, "nothing is left to wait for"
    assert ended.HasField("end_time")
    queries = await study_queries(stubs, study.name)
    assert [q.state for q in queries] == [rank_pb2.JOB_STATE_CANCELLED] * QUERIES
    assert [q.completion_reason for q in queries] == [
        rank_pb2.COMPLETION_REASON_CANCELLED
    ] * QUERIES
    assert all(q.job for q in queries[:2]) and not any(q.job for q in queries[2:])
    report = await stubs.studies.GetStudyReport(study_pb2.GetStudyReportRequest(name=study.name))
    assert report.state == study_pb2.STUDY_STATE_CANCELLED and not report.complete
    # Cancelling an ended study returns it as it is.
    assert await stubs.studies.CancelStudy(study_pb2.CancelStudyRequest(name=study.name)) == ended


async def test_a_cancelled_draft_takes_no_inputs_and_never_starts(stubs: Stubs):
    data = collection(queries=2)
    spec = study_pb2.StudySpec(depth=3, ranking=oracle_ranking(top_k=3))
    draft = await stubs.studies.CreateStudy(study_pb2.CreateStudyRequest(spec=spec))
    await stubs.studies.AddStudyInputs(inputs_request(draft.name, data, request_id="first"))
    cancelled = await stubs.studies.CancelStudy(study_pb2.CancelStudyRequest(name=draft.name))
    assert cancelled.state == study_pb2.STUDY_STATE_CANCELLED
    assert cancelled.HasField("end_time") and not cancelled.HasField("start_time")

    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await stubs.studies.AddStudyInputs(inputs_request(draft.name, data, request_id="second"))
    assert refused.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "was cancelled before it started" in refused.value.details()
    # The chunk it has, sent again, is answered as the first time.
    resent = await stubs.studies.AddStudyInputs(
        inputs_request(draft.name, data, request_id="first")
    )
    assert not resent.added and resent.study.inputs.chunks == 1

    started = await stubs.studies.StartStudy(study_pb2.StartStudyRequest(name=draft.name))
    assert started.state == study_pb2.STUDY_STATE_CANCELLED
    await anyio.sleep(AFTERWARDS_S)
    assert await study_jobs(stubs, draft.name) == []
    assert await stubs.studies.GetStudy(study_pb2.GetStudyRequest(name=draft.name)) == cancelled
    queries = await stubs.studies.ListStudyQueries(
        study_pb2.ListStudyQueriesRequest(name=draft.name)
    )
    assert list(queries.queries) == []


async def test_a_watcher_sees_the_cancel_and_its_stream_ends(stubs: Stubs):
    data = collection(queries=QUERIES)
    study = await started_study(stubs, _slow_spec(), inputs_request("", data))
    seen: list[study_pb2.Study] = []

    async def watch() -> None:
        async for update in stubs.studies.WatchStudy(study_pb2.WatchStudyRequest(name=study.name)):
            seen.append(update)

    with anyio.fail_after(15):
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(watch)
            await until_study(stubs, study.name, lambda s: s.progress.running >= 1)
            await stubs.studies.CancelStudy(study_pb2.CancelStudyRequest(name=study.name))
    assert seen[0].state == study_pb2.STUDY_STATE_RUNNING
    assert seen[-1].state == study_pb2.STUDY_STATE_CANCELLED
    assert all(s.state == study_pb2.STUDY_STATE_RUNNING for s in seen[:-1])
    jobs = await study_jobs(stubs, study.name)
    assert jobs and all(job.state in ENDED_JOB_STATES for job in jobs)
