"""A study survives its server: killed with SIGKILL in the middle, restarted on the same SQLite
file, it goes on where it stood and ends with every query judged once, by one job, whose stored
verdicts were never bought again."""

from __future__ import annotations

import anyio
import grpc
from study_calls import (
    Stubs,
    duplicated_request_ids,
    job_events,
    paid_calls,
    started_study,
    study_id,
    study_jobs,
    study_queries,
    until_final,
    until_study,
)
from study_data import (
    RANK_BANDS,
    collection,
    inputs_request,
    oracle_ranking,
    run_request,
    without,
)

from tierank.server.storage.sqlite import SqliteStorage
from tierank.v1 import rank_pb2, study_pb2

QUERIES = 8
# Judges slow enough that the kill falls while queries are live and others have ended.
LATENCY_MS = 120


def _spec() -> study_pb2.StudySpec:
    ranking = oracle_ranking(
        noise=0.5, latency_ms=LATENCY_MS, top_k=3, batch_size=4, max_in_flight=2
    )
    return study_pb2.StudySpec(depth=4, ranking=ranking, max_live_queries=2, labels=RANK_BANDS)


def _mid_study(study: study_pb2.Study) -> bool:
    progress = study.progress
    ended = progress.settled + progress.provisional + progress.failed
    return ended >= 2 and progress.running >= 1


async def test_kill_9_mid_study_then_restart_completes_it_without_paying_twice(server_process):
    data = collection(queries=QUERIES)
    address = await anyio.to_thread.run_sync(server_process.start)
    async with grpc.aio.insecure_channel(address) as channel:
        stubs = Stubs.on(channel)
        study = await started_study(stubs, _spec(), inputs_request("", data), "durable")
        # Two queries ended and a job running, read together: the study's progress counts a
        # query running from its job's creation, before the job itself runs.
        with anyio.fail_after(30):
            while True:
                before = await until_study(stubs, study.name, _mid_study, poll_s=0.02)
                live_before = [
                    job
                    for job in await study_jobs(stubs, study.name)
                    if job.state == rank_pb2.JOB_STATE_RUNNING
                ]
                if live_before:
                    break
    assert live_before, "a query's job was under way when the server was killed"
    server_process.kill9()

    address = await anyio.to_thread.run_sync(server_process.start)
    async with grpc.aio.insecure_channel(address) as channel:
        stubs = Stubs.on(channel)
        # Resumed at once: a restarted server owns its database, no lease of the dead one holds.
        ended = await until_final(stubs, study.name, timeout=15)
        jobs = await study_jobs(stubs, study.name)
        calls = {job.name: await paid_calls(stubs, job.name) for job in jobs}
        queries = await study_queries(stubs, study.name)
        report = await stubs.studies.GetStudyReport(
            study_pb2.GetStudyReportRequest(name=study.name)
        )

    assert ended.state == study_pb2.STUDY_STATE_SUCCEEDED, ended.error
    progress = ended.progress
    assert (progress.pending, progress.running, progress.failed) == (0, 0, 0), progress
    assert progress.settled + progress.provisional == QUERIES == progress.queries
    assert progress.settled + progress.provisional >= (
        before.progress.settled + before.progress.provisional
    )
    # One job per query, the same one before and after the kill.
    assert not duplicated_request_ids(jobs)
    assert sorted(int(job.request_id.rpartition("-q")[2]) for job in jobs) == list(
        range(1, QUERIES + 1)
    )
    assert {job.name for job in live_before} <= set(calls)
    assert [q.job for q in queries] == [
        next(job.name for job in jobs if job.request_id.endswith(f"-q{position}"))
        for position in range(1, QUERIES + 1)
    ]
    # The study's cost is its jobs' cost, each call counted once.
    assert progress.judge_calls == sum(calls.values()) == sum(q.judge_calls for q in queries)
    assert report.cost.judge_calls == progress.judge_calls
    assert list(report.ranking) and report.state == study_pb2.STUDY_STATE_SUCCEEDED
    assert server_process.terminate() == 0


async def test_a_kill_before_the_progress_was_written_leaves_no_query_counted_twice_or_lost(
    server_process,
):
    """The driver records a query's job, then the study's progress at the end of its pass: a
    kill between the two leaves the progress of before the job started. Made here on purpose
    (the progress rewritten as it stood at the start, with a job already recorded), the
    resumed study must still count each query once."""
    data = collection(queries=4)
    spec = _spec()
    spec.max_live_queries = 1
    address = await anyio.to_thread.run_sync(server_process.start)
    async with grpc.aio.insecure_channel(address) as channel:
        stubs = Stubs.on(channel)
        study = await started_study(stubs, spec, inputs_request("", data))
        at_start = study.progress
        await until_study(stubs, study.name, lambda s: s.progress.running == 1, poll_s=0.01)
    server_process.kill9()

    storage = SqliteStorage(server_process.db, synchronous="FULL")
    try:
        rows = await storage.study_queries(study_id(study.name), 0, 10)
        assert rows[0].job_id and not rows[0].outcome
        await storage.update_study_progress(study_id(study.name), at_start.SerializeToString())
    finally:
        await storage.close()

    address = await anyio.to_thread.run_sync(server_process.start)
    async with grpc.aio.insecure_channel(address) as channel:
        stubs = Stubs.on(channel)
        ended = await until_final(stubs, study.name, timeout=20)
        jobs = await study_jobs(stubs, study.name)
    progress = ended.progress
    assert ended.state == study_pb2.STUDY_STATE_SUCCEEDED, ended.error
    assert (progress.pending, progress.running) == (0, 0), progress
    assert progress.settled + progress.provisional == len(data.topics) == len(jobs)
    assert not duplicated_request_ids(jobs)


async def test_kill_9_mid_extension_resumes_it_without_asking_any_call_again(server_process):
    """A run added to an ended study, the server killed while the grown queries' new jobs (each
    starting from its previous job's verdicts) are under way: restarted, each grown query has
    one new job, which asked no call its previous job or its own first life had answered."""
    data = collection(queries=QUERIES)
    without_poor = without(data, "poor")
    address = await anyio.to_thread.run_sync(server_process.start)
    async with grpc.aio.insecure_channel(address) as channel:
        stubs = Stubs.on(channel)
        study = await started_study(stubs, _spec(), inputs_request("", without_poor))
        await until_final(stubs, study.name, timeout=60)
        first_jobs = {job.name for job in await study_jobs(stubs, study.name)}
        await stubs.studies.AddStudyInputs(run_request(study.name, data, "poor", "poor"))
        await stubs.studies.ExtendStudy(study_pb2.ExtendStudyRequest(name=study.name))
        await until_study(
            stubs, study.name, lambda s: s.progress.running >= 1, timeout=30, poll_s=0.02
        )
        live = [
            job
            for job in await study_jobs(stubs, study.name)
            if "-after-" in job.request_id and job.state == rank_pb2.JOB_STATE_RUNNING
        ]
    assert live, "a grown query's new job was under way when the server was killed"
    server_process.kill9()

    address = await anyio.to_thread.run_sync(server_process.start)
    async with grpc.aio.insecure_channel(address) as channel:
        stubs = Stubs.on(channel)
        ended = await until_final(stubs, study.name, timeout=30)
        jobs = {job.name: job for job in await study_jobs(stubs, study.name)}
        queries = await study_queries(stubs, study.name)
        continued = [job for job in jobs.values() if "-after-" in job.request_id]
        assert continued, "some query grew"
        assert not duplicated_request_ids(list(jobs.values()))
        for job in continued:
            previous = "jobs/" + job.request_id.rpartition("-after-")[2]
            assert previous in first_jobs
            own = await paid_calls_after(stubs, job.name, previous)
            full = await stubs.rank.GetJob(
                rank_pb2.GetJobRequest(name=job.name, view=rank_pb2.JOB_VIEW_FULL)
            )
            before = await stubs.rank.GetJob(
                rank_pb2.GetJobRequest(name=previous, view=rank_pb2.JOB_VIEW_FULL)
            )
            assert full.stats.judge_calls == before.stats.judge_calls + own
    assert ended.state == study_pb2.STUDY_STATE_SUCCEEDED, ended.error
    current = {q.job for q in queries}
    assert {job.name for job in continued} <= current
    assert ended.progress.judge_calls == sum(q.judge_calls for q in queries)
    assert server_process.terminate() == 0


async def paid_calls_after(stubs: Stubs, job_name: str, previous: str) -> int:
    """The calls a continuing job made itself: its stored verdicts, each asked once, none of
    them one its previous job had answered."""
    own = [e.verdict.call_id for e in await job_events(stubs, job_name) if e.HasField("verdict")]
    earlier = {
        e.verdict.call_id for e in await job_events(stubs, previous) if e.HasField("verdict")
    }
    assert len(own) == len(set(own)), f"{job_name}: a stored verdict was asked again"
    assert not set(own) & earlier, f"{job_name}: asked a call its previous job had answered"
    return len(own)
