"""How a study schedules its queries: never more live jobs than max_live_queries, as many as
that while queries wait, started in topic order; two studies at once both go on."""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator

import anyio
import grpc
import pytest
from study_calls import (
    ENDED_JOB_STATES,
    FINAL_STUDY_STATES,
    Stubs,
    all_jobs,
    job_request_prefix,
    position_of,
    started_study,
    study_jobs,
    until_final,
)
from study_data import collection, inputs_request, oracle_ranking

from tierank.v1 import study_pb2

QUERIES = 7
LIVE = 2


@pytest.fixture
async def stubs(server_address: str) -> AsyncIterator[Stubs]:
    async with grpc.aio.insecure_channel(server_address) as channel:
        yield Stubs.on(channel)


def _spec(live: int = LIVE) -> study_pb2.StudySpec:
    ranking = oracle_ranking(noise=0.5, latency_ms=80, top_k=3, batch_size=4, max_in_flight=2)
    return study_pb2.StudySpec(depth=4, ranking=ranking, max_live_queries=live)


async def _live_counts(stubs: Stubs, names: list[str]) -> list[dict[str, int]]:
    """Each study's unfinished jobs, looked at every few milliseconds until all have ended."""
    seen: list[dict[str, int]] = []
    with anyio.fail_after(60):
        while True:
            jobs = await all_jobs(stubs)
            seen.append(
                {
                    name: sum(
                        job.request_id.startswith(job_request_prefix(name))
                        and job.state not in ENDED_JOB_STATES
                        for job in jobs
                    )
                    for name in names
                }
            )
            studies = [
                await stubs.studies.GetStudy(study_pb2.GetStudyRequest(name=name)) for name in names
            ]
            if all(study.state in FINAL_STUDY_STATES for study in studies):
                return seen
            await anyio.sleep(0.01)


async def test_no_more_than_max_live_queries_run_at_once_and_they_start_in_topic_order(
    stubs: Stubs,
):
    data = collection(queries=QUERIES)
    study = await started_study(stubs, _spec(), inputs_request("", data))
    counts = [seen[study.name] for seen in await _live_counts(stubs, [study.name])]
    assert max(counts) == LIVE, counts  # never more, and as many while queries waited
    ended = await until_final(stubs, study.name)
    assert ended.state == study_pb2.STUDY_STATE_SUCCEEDED
    jobs = await study_jobs(stubs, study.name)
    assert len(jobs) == QUERIES
    by_creation = sorted(jobs, key=lambda job: job.create_time.ToNanoseconds())
    assert [position_of(job) for job in by_creation] == list(range(1, QUERIES + 1))
    # Each job is its query's, in the study's topic order.
    assert [job.query for job in by_creation] == list(data.topics.values())


async def test_one_live_query_at_a_time_runs_the_queries_one_after_another(stubs: Stubs):
    data = collection(queries=4)
    study = await started_study(stubs, _spec(live=1), inputs_request("", data))
    counts = [seen[study.name] for seen in await _live_counts(stubs, [study.name])]
    assert max(counts) == 1
    jobs = sorted(
        await study_jobs(stubs, study.name), key=lambda job: job.create_time.ToNanoseconds()
    )
    # Each job was created once the one before had ended.
    for earlier, later in itertools.pairwise(jobs):
        assert earlier.update_time.ToNanoseconds() <= later.create_time.ToNanoseconds()


async def test_two_studies_at_once_both_go_on(stubs: Stubs):
    data = collection(queries=5)
    first = await started_study(stubs, _spec(), inputs_request("", data))
    second = await started_study(stubs, _spec(), inputs_request("", data))
    seen = await _live_counts(stubs, [first.name, second.name])
    assert max(s[first.name] for s in seen) == LIVE
    assert max(s[second.name] for s in seen) == LIVE
    assert any(s[first.name] and s[second.name] for s in seen), "one waited for the other"
    for name in (first.name, second.name):
        ended = await until_final(stubs, name)
        assert ended.state == study_pb2.STUDY_STATE_SUCCEEDED
        assert ended.progress.settled + ended.progress.provisional == len(data.topics)
