"""Studies through the real API, as the tests drive them: made and started in three calls,
waited for, and their jobs found (each named by its request_id "study-{id}-q{position}") and
read back for what they cost."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import anyio
import grpc
import psycopg

from tierank.v1 import rank_pb2, rank_pb2_grpc, study_pb2, study_pb2_grpc

FINAL_STUDY_STATES = {
    study_pb2.STUDY_STATE_SUCCEEDED,
    study_pb2.STUDY_STATE_FAILED,
    study_pb2.STUDY_STATE_CANCELLED,
}
ENDED_JOB_STATES = {
    rank_pb2.JOB_STATE_SUCCEEDED,
    rank_pb2.JOB_STATE_FAILED,
    rank_pb2.JOB_STATE_CANCELLED,
}
Metadata = tuple[tuple[str, str], ...]


@dataclass
class Stubs:
    """Both services on one channel, every call with the same credentials."""

    studies: study_pb2_grpc.StudyServiceStub
    rank: rank_pb2_grpc.RankServiceStub
    metadata: Metadata = ()

    @classmethod
    def on(cls, channel: grpc.aio.Channel, metadata: Metadata = ()) -> Stubs:
        return cls(
            study_pb2_grpc.StudyServiceStub(channel),
            rank_pb2_grpc.RankServiceStub(channel),
            metadata,
        )


def study_id(name: str) -> str:
    return name.removeprefix("studies/")


def job_request_prefix(name: str) -> str:
    return f"study-{study_id(name)}-q"


async def started_study(
    stubs: Stubs,
    spec: study_pb2.StudySpec,
    inputs: study_pb2.AddStudyInputsRequest,
    request_id: str = "",
) -> study_pb2.Study:
    """Created, given `inputs` (its `study` field filled in here) and started."""
    md = stubs.metadata
    study = await stubs.studies.CreateStudy(
        study_pb2.CreateStudyRequest(spec=spec, request_id=request_id), metadata=md
    )
    inputs.study = study.name
    await stubs.studies.AddStudyInputs(inputs, metadata=md)
    return await stubs.studies.StartStudy(study_pb2.StartStudyRequest(name=study.name), metadata=md)


async def until_study(
    stubs: Stubs, name: str, done, timeout: float = 30, poll_s: float = 0.05
) -> study_pb2.Study:
    """The study once `done(study)` holds, looked at every `poll_s`; fails after `timeout`."""
    with anyio.fail_after(timeout):
        while True:
            study = await stubs.studies.GetStudy(
                study_pb2.GetStudyRequest(name=name), metadata=stubs.metadata
            )
            if done(study):
                return study
            await anyio.sleep(poll_s)


async def until_final(stubs: Stubs, name: str, timeout: float = 30) -> study_pb2.Study:
    return await until_study(stubs, name, lambda s: s.state in FINAL_STUDY_STATES, timeout)


async def all_jobs(stubs: Stubs) -> list[rank_pb2.Job]:
    """Every job of the caller's tenant (BASIC view: no stats), every page."""
    jobs: list[rank_pb2.Job] = []
    token = ""
    while True:
        page = await stubs.rank.ListJobs(
            rank_pb2.ListJobsRequest(page_size=1000, page_token=token), metadata=stubs.metadata
        )
        jobs.extend(page.jobs)
        token = page.next_page_token
        if not token:
            return jobs


async def study_jobs(stubs: Stubs, name: str) -> list[rank_pb2.Job]:
    """The study's jobs, found by their request_ids."""
    prefix = job_request_prefix(name)
    return [job for job in await all_jobs(stubs) if job.request_id.startswith(prefix)]


def duplicated_request_ids(jobs: list[rank_pb2.Job]) -> list[str]:
    counts = Counter(job.request_id for job in jobs)
    return sorted(request_id for request_id, count in counts.items() if count > 1)


def position_of(job: rank_pb2.Job) -> int:
    return int(job.request_id.rpartition("-q")[2])


async def job_events(stubs: Stubs, job_name: str) -> list[rank_pb2.JobEvent]:
    """Every stored event of an ended job."""
    with anyio.fail_after(30):
        return [
            event
            async for event in stubs.rank.WatchJob(
                rank_pb2.WatchJobRequest(name=job_name), metadata=stubs.metadata
            )
        ]


async def paid_calls(stubs: Stubs, job_name: str) -> int:
    """The judge calls the job made itself, checked against its stats: each call stored once,
    and every call the stats count is one stored, uncached verdict of this job, or, for a job
    that continues another (request_id "...-after-{id}"), one the other job counts."""
    job = await stubs.rank.GetJob(rank_pb2.GetJobRequest(name=job_name), metadata=stubs.metadata)
    verdicts = [e.verdict for e in await job_events(stubs, job_name) if e.HasField("verdict")]
    call_ids = [verdict.call_id for verdict in verdicts]
    assert len(call_ids) == len(set(call_ids)), f"{job_name}: a stored verdict was asked again"
    own = sum(not v.cached for v in verdicts)
    _, after, previous = job.request_id.rpartition("-after-")
    if after:
        continued = await stubs.rank.GetJob(
            rank_pb2.GetJobRequest(name=f"jobs/{previous}"), metadata=stubs.metadata
        )
        assert job.stats.judge_calls == own + continued.stats.judge_calls, job_name
    else:
        assert job.stats.judge_calls == own, job_name
    return own


async def study_queries(stubs: Stubs, name: str, page_size: int = 0) -> list[study_pb2.StudyQuery]:
    """Every query of the study, page by page."""
    queries: list[study_pb2.StudyQuery] = []
    token = ""
    while True:
        page = await stubs.studies.ListStudyQueries(
            study_pb2.ListStudyQueriesRequest(name=name, page_size=page_size, page_token=token),
            metadata=stubs.metadata,
        )
        queries.extend(page.queries)
        token = page.next_page_token
        if not token:
            return queries


def driving_replica(db: str, name: str) -> str:
    """The replica that holds the study's lease on PostgreSQL `db` ("" when none does)."""
    with psycopg.connect(db) as conn:
        row = conn.execute(
            "SELECT owner FROM studies WHERE study_id = %s", (study_id(name),)
        ).fetchone()
    return row[0] if row else ""
