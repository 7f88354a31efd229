"""Two replicas (server processes) on one PostgreSQL schema: the one driving a study is killed
with SIGKILL, and the other takes the study over once its lease runs out and ends it, with one
job per query, in the study's trace."""

from __future__ import annotations

import os
import signal
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import anyio
import grpc
import pytest
from study_calls import (
    Stubs,
    driving_replica,
    duplicated_request_ids,
    paid_calls,
    started_study,
    study_id,
    study_jobs,
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

from tierank.client import LocalServer
from tierank.v1 import study_pb2

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "observability"))

from collector import TraceCollector, named

pytestmark = pytest.mark.long_module

# The shortest --lease-seconds allows: a study, like a job, moves on soonest.
LEASE_S = 2.0
# How often a replica looks for studies to take up (the driver's claim loop), and slack.
CLAIM_LOOP_S = 2.0
SLACK_S = 1.5
QUERIES = 8


def _replicas(db: str, count: int, env: dict[str, str] | None = None) -> list[LocalServer]:
    servers = [
        LocalServer(
            db=db, extra_args=("--lease-seconds", str(LEASE_S), "--log-level", "warning"), env=env
        )
        for _ in range(count)
    ]
    with ThreadPoolExecutor(count) as pool:
        list(pool.map(LocalServer.start, servers))
    return servers


async def test_kill_9_the_driving_replica_and_the_other_ends_the_study(schema_url: str):
    data = collection(queries=QUERIES)
    ranking = oracle_ranking(noise=0.5, latency_ms=150, top_k=3, batch_size=4, max_in_flight=2)
    spec = study_pb2.StudySpec(depth=4, ranking=ranking, max_live_queries=2, labels=RANK_BANDS)
    collector = TraceCollector().__enter__()
    # Spans leave every 50 ms: the killed replica has sent what had ended.
    env = {
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": collector.endpoint,
        "OTEL_BSP_SCHEDULE_DELAY": "50",
    }
    servers = await anyio.to_thread.run_sync(_replicas, schema_url, 2, env)
    try:
        async with (
            grpc.aio.insecure_channel(servers[0].address) as first,
            grpc.aio.insecure_channel(servers[1].address) as second,
        ):
            by_replica = {servers[0].pid: Stubs.on(first), servers[1].pid: Stubs.on(second)}
            stubs = by_replica[servers[0].pid]
            study = await started_study(stubs, spec, inputs_request("", data))
            await until_study(
                stubs, study.name, lambda s: s.progress.settled + s.progress.provisional >= 1
            )
            driver = driving_replica(schema_url, study.name)
            assert driver
            # A replica's id holds its process id ("host-pid-random").
            victim = next(s for s in servers if f"-{s.pid}-" in driver)
            survivor = next(s for s in servers if s is not victim)
            os.kill(victim.pid, signal.SIGKILL)
            killed = time.monotonic()
            victim.stop()

            stubs = by_replica[survivor.pid]
            with anyio.fail_after(LEASE_S + CLAIM_LOOP_S + SLACK_S):
                while driving_replica(schema_url, study.name) in ("", driver):
                    await anyio.sleep(0.05)
            taken_over = time.monotonic() - killed
            ended = await until_final(stubs, study.name, timeout=25)
            jobs = await study_jobs(stubs, study.name)
            calls = [await paid_calls(stubs, job.name) for job in jobs]
        job_ids = {job.name.rsplit("/", 1)[1] for job in jobs}
        sid = study_id(study.name)
        spans = collector.wait_for(
            lambda spans: any(
                s.attributes.get("tierank.study.id") == sid
                for s in named(spans, "tierank.study.end")
            )
        )
    finally:
        for server in servers:
            server.stop()
        collector.__exit__()

    assert taken_over < LEASE_S + CLAIM_LOOP_S + SLACK_S
    assert ended.state == study_pb2.STUDY_STATE_SUCCEEDED, ended.error
    progress = ended.progress
    assert (progress.pending, progress.running, progress.failed) == (0, 0, 0), progress
    assert progress.settled + progress.provisional == QUERIES
    assert not duplicated_request_ids(jobs)
    assert len(jobs) == QUERIES
    assert progress.judge_calls == sum(calls)
    # One trace: the survivor's run of the study (the victim's never ended) and every job's
    # runs, on either replica.
    (run,) = [
        s for s in named(spans, "tierank.study.run") if s.attributes["tierank.study.id"] == sid
    ]
    assert run.trace_id == ended.trace_id != ""
    job_runs = [
        s for s in named(spans, "tierank.job.run") if s.attributes["tierank.job.id"] in job_ids
    ]
    assert {s.trace_id for s in job_runs} == {ended.trace_id}
    # Both replicas' work is in it (the victim's waves, sent as they ended).
    replicas = {s.resource["service.instance.id"] for s in spans if s.trace_id == run.trace_id}
    assert run.resource["service.instance.id"] in replicas and len(replicas) == 2


async def test_a_server_that_drives_only_its_own_studies_never_holds_another_replicas(
    schema_url: str,
):
    """A server with --resume-jobs off (the CLI's embedded one) beside the replicas: a study
    whose driver died is left for a replica that drives every study, not leased and kept
    still by the server that will not drive it."""
    data = collection(queries=3)
    ranking = oracle_ranking(noise=0.5, latency_ms=100, top_k=3, batch_size=4, max_in_flight=2)
    spec = study_pb2.StudySpec(depth=4, ranking=ranking, max_live_queries=1, labels=RANK_BANDS)
    own_only = LocalServer(
        db=schema_url,
        extra_args=(
            "--lease-seconds",
            str(LEASE_S),
            "--resume-jobs",
            "off",
            "--log-level",
            "warning",
        ),
    )
    servers = [own_only]
    try:
        await anyio.to_thread.run_sync(own_only.start)
        (first,) = await anyio.to_thread.run_sync(_replicas, schema_url, 1)
        servers.append(first)
        async with grpc.aio.insecure_channel(first.address) as channel:
            stubs = Stubs.on(channel)
            study = await started_study(stubs, spec, inputs_request("", data))
            await until_study(stubs, study.name, lambda s: s.progress.running == 1)
        dead = first.pid
        os.kill(dead, signal.SIGKILL)
        first.stop()
        # Long enough for the other server to have claimed the study, were it to.
        await anyio.sleep(LEASE_S + CLAIM_LOOP_S + SLACK_S)
        assert f"-{dead}-" in driving_replica(schema_url, study.name), "the dead one's, still"
        (second,) = await anyio.to_thread.run_sync(_replicas, schema_url, 1)
        servers.append(second)
        async with grpc.aio.insecure_channel(second.address) as channel:
            stubs = Stubs.on(channel)
            ended = await until_final(stubs, study.name, timeout=LEASE_S + CLAIM_LOOP_S + 10)
            jobs = await study_jobs(stubs, study.name)
    finally:
        for server in servers:
            server.stop()
    assert ended.state == study_pb2.STUDY_STATE_SUCCEEDED, ended.error
    assert len(jobs) == len(data.topics) and not duplicated_request_ids(jobs)


async def test_an_extension_on_postgresql_survives_its_driving_replica(schema_url: str):
    """A run added to an ended study on PostgreSQL; the replica driving the extension round is
    killed; the other one ends the round, each grown query judged by one new job."""
    data = collection(queries=QUERIES)
    ranking = oracle_ranking(noise=0.5, latency_ms=150, top_k=3, batch_size=4, max_in_flight=2)
    spec = study_pb2.StudySpec(depth=4, ranking=ranking, max_live_queries=2, labels=RANK_BANDS)
    servers = await anyio.to_thread.run_sync(_replicas, schema_url, 2)
    try:
        async with (
            grpc.aio.insecure_channel(servers[0].address) as first,
            grpc.aio.insecure_channel(servers[1].address) as second,
        ):
            by_replica = {servers[0].pid: Stubs.on(first), servers[1].pid: Stubs.on(second)}
            stubs = by_replica[servers[0].pid]
            study = await started_study(stubs, spec, inputs_request("", without(data, "poor")))
            await until_final(stubs, study.name, timeout=60)
            await stubs.studies.AddStudyInputs(run_request(study.name, data, "poor", "poor"))
            extended = await stubs.studies.ExtendStudy(
                study_pb2.ExtendStudyRequest(name=study.name, request_id="round-1")
            )
            grown = extended.inputs.rounds[1].queries_extended
            assert grown
            await until_study(stubs, study.name, lambda s: s.progress.running >= 1)
            driver = driving_replica(schema_url, study.name)
            victim = next(s for s in servers if f"-{s.pid}-" in driver)
            survivor = next(s for s in servers if s is not victim)
            os.kill(victim.pid, signal.SIGKILL)
            victim.stop()
            stubs = by_replica[survivor.pid]
            ended = await until_final(stubs, study.name, timeout=40)
            jobs = await study_jobs(stubs, study.name)
            calls = [await paid_calls(stubs, job.name) for job in jobs]
    finally:
        for server in servers:
            server.stop()

    assert ended.state == study_pb2.STUDY_STATE_SUCCEEDED, ended.error
    assert not duplicated_request_ids(jobs)
    assert sum("-after-" in job.request_id for job in jobs) == grown
    assert len(jobs) == QUERIES + grown
    assert ended.progress.judge_calls == sum(calls), "each call counted once, none asked twice"
