"""With --auth keys, every StudyService RPC that names another tenant's study answers exactly
as for a study that does not exist (the whole status, details and all, byte for byte but for
the name asked about), and changes nothing."""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import anyio
import grpc
import pytest
from grpc_status import rpc_status
from study_calls import (
    ENDED_JOB_STATES,
    FINAL_STUDY_STATES,
    Stubs,
    all_jobs,
    started_study,
    study_queries,
    until_final,
)
from study_data import collection, inputs_request, oracle_ranking

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tenancy"))

from keyed import KeyedServer, keyed_server_on

from tierank.v1 import rank_pb2, study_pb2

MISSING = "studies/" + "0" * 24


@pytest.fixture
async def keyed_server(tmp_path: Path) -> AsyncIterator[KeyedServer]:
    async with keyed_server_on(tmp_path / "tierank.db") as server:
        yield server


def _spec() -> study_pb2.StudySpec:
    return study_pb2.StudySpec(depth=3, ranking=oracle_ranking(top_k=3), max_live_queries=2)


def _calls(stubs: Stubs, name: str) -> dict[str, Callable[[], Awaitable[object]]]:
    """Every StudyService RPC that names a study, on `name`."""
    studies, md = stubs.studies, stubs.metadata
    chunk = inputs_request(name, collection(queries=1, docs=3), request_id="intruder")

    async def watch() -> list[study_pb2.Study]:
        return [
            s async for s in studies.WatchStudy(study_pb2.WatchStudyRequest(name=name), metadata=md)
        ]

    return {
        "GetStudy": lambda: studies.GetStudy(study_pb2.GetStudyRequest(name=name), metadata=md),
        "AddStudyInputs": lambda: studies.AddStudyInputs(chunk, metadata=md),
        "StartStudy": lambda: studies.StartStudy(
            study_pb2.StartStudyRequest(name=name), metadata=md
        ),
        "CancelStudy": lambda: studies.CancelStudy(
            study_pb2.CancelStudyRequest(name=name), metadata=md
        ),
        "ExtendStudy": lambda: studies.ExtendStudy(
            study_pb2.ExtendStudyRequest(name=name, request_id="intruder"), metadata=md
        ),
        "WatchStudy": watch,
        "GetStudyReport": lambda: studies.GetStudyReport(
            study_pb2.GetStudyReportRequest(name=name), metadata=md
        ),
        "ListStudyQueries": lambda: studies.ListStudyQueries(
            study_pb2.ListStudyQueriesRequest(name=name), metadata=md
        ),
        "ExportStudyQrels": lambda: studies.ExportStudyQrels(
            study_pb2.ExportStudyQrelsRequest(name=name), metadata=md
        ),
        "CalibrateStudy": lambda: studies.CalibrateStudy(
            study_pb2.CalibrateStudyRequest(name=name), metadata=md
        ),
    }


async def _refusal(call: Callable[[], Awaitable[object]]) -> grpc.aio.AioRpcError:
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await call()
    return refused.value


def _status_bytes(error: grpc.aio.AioRpcError) -> bytes:
    status = rpc_status.from_call(error)
    assert status is not None, "a google.rpc.Status comes with every error"
    return status.SerializeToString()


async def test_another_tenants_study_is_not_found_exactly_like_a_missing_one(
    keyed_server: KeyedServer,
):
    alice = Stubs.on(
        keyed_server.channel, keyed_server.session(await keyed_server.member_key("team-a")).metadata
    )
    bob = Stubs.on(
        keyed_server.channel, keyed_server.session(await keyed_server.member_key("team-b")).metadata
    )
    data = collection(queries=2, docs=6)
    ended = await started_study(alice, _spec(), inputs_request("", data, human=True))
    ended = await until_final(alice, ended.name)
    assert ended.state == study_pb2.STUDY_STATE_SUCCEEDED
    draft = await alice.studies.CreateStudy(
        study_pb2.CreateStudyRequest(spec=_spec()), metadata=alice.metadata
    )
    await alice.studies.AddStudyInputs(inputs_request(draft.name, data), metadata=alice.metadata)
    before = {
        name: await alice.studies.GetStudy(
            study_pb2.GetStudyRequest(name=name), metadata=alice.metadata
        )
        for name in (ended.name, draft.name)
    }
    assert len(MISSING) == len(ended.name) == len(draft.name)
    service = study_pb2.DESCRIPTOR.services_by_name["StudyService"]
    naming_a_study = set(service.methods_by_name) - {"CreateStudy", "ListStudies"}
    assert set(_calls(bob, MISSING)) == naming_a_study, "every RPC that names a study is tried"

    for theirs in (ended.name, draft.name):
        crossing, nothing = _calls(bob, theirs), _calls(bob, MISSING)
        for rpc, call in crossing.items():
            crossed = await _refusal(call)
            absent = await _refusal(nothing[rpc])
            assert crossed.code() == absent.code() == grpc.StatusCode.NOT_FOUND, rpc
            assert crossed.details().replace(theirs, MISSING) == absent.details(), rpc
            assert _status_bytes(crossed).replace(
                theirs.encode(), MISSING.encode()
            ) == _status_bytes(absent), rpc

    listed = await bob.studies.ListStudies(study_pb2.ListStudiesRequest(), metadata=bob.metadata)
    assert not listed.studies
    jobs = await bob.rank.ListJobs(rank_pb2.ListJobsRequest(), metadata=bob.metadata)
    assert not jobs.jobs, "the study's jobs are its tenant's"
    for name, was in before.items():
        now = await alice.studies.GetStudy(
            study_pb2.GetStudyRequest(name=name), metadata=alice.metadata
        )
        assert now == was, "nothing changed"
    assert before[draft.name].state == study_pb2.STUDY_STATE_DRAFT

    # Alice can do all of it on her own study.
    for rpc, call in _calls(alice, ended.name).items():
        # Her chunk holds topics, which an ended study refuses; she has added no run to judge.
        # She sent no human sample to calibrate with.
        if rpc not in ("AddStudyInputs", "ExtendStudy", "CalibrateStudy"):
            await call()
    mine = await alice.studies.ListStudies(study_pb2.ListStudiesRequest(), metadata=alice.metadata)
    assert [s.name for s in mine.studies] == [draft.name, ended.name]


async def test_a_study_call_without_a_key_is_unauthenticated(keyed_server: KeyedServer):
    anonymous = Stubs.on(keyed_server.channel)
    for rpc, call in _calls(anonymous, MISSING).items():
        refused = await _refusal(call)
        assert refused.code() == grpc.StatusCode.UNAUTHENTICATED, rpc
    refused = await _refusal(
        lambda: anonymous.studies.CreateStudy(study_pb2.CreateStudyRequest(spec=_spec()))
    )
    assert refused.code() == grpc.StatusCode.UNAUTHENTICATED


async def _unfinished_jobs_at_most(stubs: Stubs, name: str) -> int:
    """The most unfinished jobs the tenant had at once, looked at until the study ended."""
    most = 0
    with anyio.fail_after(60):
        while True:
            jobs = await all_jobs(stubs)
            most = max(most, sum(job.state not in ENDED_JOB_STATES for job in jobs))
            study = await stubs.studies.GetStudy(
                study_pb2.GetStudyRequest(name=name), metadata=stubs.metadata
            )
            if study.state in FINAL_STUDY_STATES:
                return most
            await anyio.sleep(0.01)


async def test_a_study_keeps_within_its_tenants_concurrency_quota(keyed_server: KeyedServer):
    key = await keyed_server.member_key("team-a", max_concurrent_jobs=1)
    alice = Stubs.on(keyed_server.channel, keyed_server.session(key).metadata)
    ranking = oracle_ranking(noise=0.5, latency_ms=60, top_k=3, batch_size=4, max_in_flight=2)
    spec = study_pb2.StudySpec(depth=3, ranking=ranking, max_live_queries=3)
    data = collection(queries=4, docs=6)
    study = await started_study(alice, spec, inputs_request("", data))
    assert await _unfinished_jobs_at_most(alice, study.name) == 1
    ended = await until_final(alice, study.name)
    assert ended.state == study_pb2.STUDY_STATE_SUCCEEDED
    assert ended.progress.settled + ended.progress.provisional == len(data.topics)


async def test_a_study_ends_when_its_tenants_daily_calls_run_out(keyed_server: KeyedServer):
    key = await keyed_server.member_key("team-a", daily_judge_calls=5)
    alice = Stubs.on(keyed_server.channel, keyed_server.session(key).metadata)
    ranking = oracle_ranking(noise=0.5, top_k=5, batch_size=4)  # several calls a query
    spec = study_pb2.StudySpec(depth=5, ranking=ranking, max_live_queries=2)
    data = collection(queries=4, docs=8)
    study = await started_study(alice, spec, inputs_request("", data))
    ended = await until_final(alice, study.name, timeout=30)
    assert ended.state == study_pb2.STUDY_STATE_SUCCEEDED, ended.error
    progress = ended.progress
    assert 0 < progress.judge_calls <= 5
    assert progress.pending == progress.running == 0
    assert progress.provisional >= 1


async def test_a_deadline_holds_while_the_tenants_quota_keeps_queries_waiting(
    keyed_server: KeyedServer,
):
    key = await keyed_server.member_key("team-a", max_concurrent_jobs=1)
    alice = Stubs.on(keyed_server.channel, keyed_server.session(key).metadata)
    # Another job of the tenant's holds its one slot for longer than the study may run.
    blocker_spec = oracle_ranking(latency_ms=500, top_k=10, batch_size=4, max_in_flight=1)
    blocker_spec.query = "something else"
    for i in range(40):
        blocker_spec.candidates.add(id=f"c{i}", text=f"passage {i}", metadata={"score": str(i)})
    blocker = await alice.rank.CreateJob(
        rank_pb2.CreateJobRequest(spec=blocker_spec), metadata=alice.metadata
    )
    deadline = 1.5
    spec = study_pb2.StudySpec(
        depth=3, ranking=oracle_ranking(top_k=3), max_live_queries=2, deadline_seconds=deadline
    )
    data = collection(queries=3, docs=6)
    study = await started_study(alice, spec, inputs_request("", data))
    ended = await until_final(alice, study.name, timeout=deadline + 3)
    still = await alice.rank.GetJob(
        rank_pb2.GetJobRequest(name=blocker.name), metadata=alice.metadata
    )
    assert still.state not in ENDED_JOB_STATES, "the quota was held all along"
    await alice.rank.CancelJob(
        rank_pb2.CancelJobRequest(name=blocker.name), metadata=alice.metadata
    )
    assert ended.state == study_pb2.STUDY_STATE_SUCCEEDED
    assert ended.progress.provisional == len(data.topics)
    queries = await study_queries(alice, study.name)
    assert {q.completion_reason for q in queries} == {rank_pb2.COMPLETION_REASON_DEADLINE_EXCEEDED}
    assert not any(q.job for q in queries)
