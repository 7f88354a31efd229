"""A study whose judge runs in batch mode, on two replicas of one PostgreSQL schema: the replica
driving it is killed with SIGKILL while its provider batch is open; the other takes the study,
its jobs and the batch's polling over, and the study settles with no call submitted (or paid
for) twice."""

from __future__ import annotations

import os
import signal
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import anyio
import grpc
from study_calls import Stubs, driving_replica, started_study, study_jobs, until_final
from study_data import RANK_BANDS, collection, inputs_request

from tierank.client import LocalServer
from tierank.v1 import rank_pb2, study_pb2

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "providers"))

from batch_fakes import FakeBatchServer, judges_config
from fakes import rank_by_score

LEASE_S = 2.0
QUERIES = 4


async def test_kill_9_the_replica_driving_a_batch_study_and_the_other_settles_it(
    schema_url: str, tmp_path: Path
) -> None:
    data = collection(queries=QUERIES, docs=12)
    # The fake ranks by the "score N" each passage's text states.
    grade = {doc: g for per_query in data.grades.values() for doc, g in per_query.items()}
    for n, doc in enumerate(data.passages):
        data.passages[doc] = f"passage {doc} has score {10 * grade[doc] + n % 10}."
    judge = rank_pb2.JudgeSpec(
        provider="anthropic",
        model="claude-haiku-4-5",
        parameters=rank_pb2.JudgeParameters(options={"mode": "batch"}),
    )
    ranking = rank_pb2.JobSpec(judges=[judge], top_k=3, batch_size=4)
    spec = study_pb2.StudySpec(
        depth=6, ranking=ranking, max_live_queries=QUERIES, labels=RANK_BANDS
    )
    async with FakeBatchServer() as fake:
        fake.respond_with("anthropic", rank_by_score)
        fake.quirks["anthropic"].open_polls = 10**6
        # A dead replica's poll lease runs out 1 s after its next poll was due.
        config = judges_config(fake, tmp_path / "judges.json", poll_lease_s=1.0, gather_s=0.3)
        env = {"TIERANK_JUDGES_CONFIG": str(config)}
        servers = [
            LocalServer(
                db=schema_url,
                extra_args=("--lease-seconds", str(LEASE_S), "--log-level", "warning"),
                env=env,
            )
            for _ in range(2)
        ]
        with ThreadPoolExecutor(2) as pool:
            await anyio.to_thread.run_sync(lambda: list(pool.map(LocalServer.start, servers)))
        try:
            async with (
                grpc.aio.insecure_channel(servers[0].address) as first,
                grpc.aio.insecure_channel(servers[1].address) as second,
            ):
                by_pid = {servers[0].pid: Stubs.on(first), servers[1].pid: Stubs.on(second)}
                study = await started_study(by_pid[servers[0].pid], spec, inputs_request("", data))
                with anyio.fail_after(30):
                    while not fake.batches or not all(b.polls for b in fake.batches.values()):
                        await anyio.sleep(0.02)
                open_before_kill = set(fake.batches)
                driver = driving_replica(schema_url, study.name)
                victim = next(s for s in servers if f"-{s.pid}-" in driver)
                survivor = next(s for s in servers if s is not victim)
                os.kill(victim.pid, signal.SIGKILL)
                await anyio.to_thread.run_sync(victim.stop)
                fake.quirks["anthropic"].open_polls = 0

                stubs = by_pid[survivor.pid]
                ended = await until_final(stubs, study.name, timeout=60)
                jobs = await study_jobs(stubs, study.name)
                shown = await stubs.studies.GetStudy(study_pb2.GetStudyRequest(name=study.name))
        finally:
            for server in servers:
                server.stop()

    assert ended.state == study_pb2.STUDY_STATE_SUCCEEDED, ended.error
    assert ended.progress.settled + ended.progress.provisional == QUERIES
    assert len(jobs) == QUERIES
    # The batches open at the kill were polled to their end by the survivor, and no call went
    # to the vendor twice: every prompt submitted once, each answered once and paid in a job.
    assert all(fake.batches[b].outcomes is not None for b in open_before_kill)
    submitted = [r.prompt for b in fake.batches.values() for _, r in b.entries]
    assert len(submitted) == len(set(submitted)) == ended.progress.judge_calls
    assert shown.state == study_pb2.STUDY_STATE_SUCCEEDED
