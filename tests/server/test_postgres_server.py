"""The server on PostgreSQL (`--db postgresql://...`), end to end: jobs run, are stored, and
survive a restart; `tierank db status|migrate` as an operator runs them; an unreachable database
stops the start in one line."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import grpc
import pytest

from tierank.client import LocalServer
from tierank.server.app import background_server
from tierank.server.settings import ServerSettings
from tierank.v1 import rank_pb2, rank_pb2_grpc


async def run_job(address: str, spec: rank_pb2.JobSpec) -> list[rank_pb2.JobEvent]:
    async with grpc.aio.insecure_channel(address) as channel:
        stub = rank_pb2_grpc.RankServiceStub(channel)
        return [e async for e in stub.Rank(rank_pb2.RankRequest(spec=spec, request_id="once"))]


async def test_jobs_run_on_postgres_and_survive_a_restart(schema_url, make_spec):
    settings = ServerSettings(listen="127.0.0.1:0", db=schema_url, shutdown_grace_s=1.0)
    spec = make_spec(n=12)
    async with background_server(settings) as address:
        events = await run_job(address, spec)
    assert events[-1].HasField("completed")
    assert [e.sequence for e in events] == list(range(1, len(events) + 1))
    async with background_server(settings) as address:
        async with grpc.aio.insecure_channel(address) as channel:
            stub = rank_pb2_grpc.RankServiceStub(channel)
            listed = await stub.ListJobs(rank_pb2.ListJobsRequest())
            assert [j.name for j in listed.jobs] == [events[-1].job]
            job = await stub.GetJob(rank_pb2.GetJobRequest(name=events[-1].job))
            assert list(job.tiers) == list(events[-1].completed.tiers)
        # The same request id after the restart is the same job (a unique constraint).
        again = await run_job(address, spec)
        assert again[-1].job == events[-1].job


def test_a_killed_server_resumes_its_job_on_postgres(schema_url, make_spec, oracle_judge):
    spec = make_spec(n=20, judges=[oracle_judge(latency_ms="300")], batch_size=4)
    # The shortest lease: the restarted server is another replica, which claims the dead
    # one's job once its lease has expired.
    fast = ("--log-level", "warning", "--lease-seconds", "2")
    first = LocalServer(db=schema_url, extra_args=fast)
    address = first.start()
    with grpc.insecure_channel(address) as channel:
        stub = rank_pb2_grpc.RankServiceStub(channel)
        job = stub.CreateJob(rank_pb2.CreateJobRequest(spec=spec))
        stream = stub.WatchJob(rank_pb2.WatchJobRequest(name=job.name))
        next(e for e in stream if e.HasField("verdict"))  # it is running
        stream.cancel()
    assert first.pid is not None
    os.kill(first.pid, signal.SIGKILL)
    first.stop()
    with (
        LocalServer(db=schema_url, extra_args=fast) as second,
        grpc.insecure_channel(second.address) as channel,
    ):
        stub = rank_pb2_grpc.RankServiceStub(channel)
        events = list(stub.WatchJob(rank_pb2.WatchJobRequest(name=job.name), timeout=60))
    assert events[-1].HasField("completed")
    assert [e.sequence for e in events] == list(range(1, len(events) + 1))


def tierank_db(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tierank.client", "db", *args],
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_db_status_and_migrate_as_an_operator(schema_url):
    before = tierank_db("status", "--db", schema_url)
    assert before.returncode == 0, before.stderr
    assert "pending" in before.stdout and "applied" not in before.stdout
    migrated = tierank_db("migrate", "--db", schema_url)
    assert migrated.returncode == 0, migrated.stderr
    after = tierank_db("status", "--db", schema_url)
    assert "pending" not in after.stdout and "applied" in after.stdout
    again = tierank_db("migrate", "--db", schema_url)
    assert "applied 0 migrations" in again.stdout


def test_an_unreachable_database_stops_the_start_in_one_line(tmp_path):
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "tierank.server",
            "--listen",
            "127.0.0.1:0",
            "--db",
            "postgresql://tierank:secret-password@127.0.0.1:1/nothing",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr
    assert "secret-password" not in done.stderr


async def test_a_nul_in_a_stored_name_is_refused_at_the_edge(schema_url, make_spec, oracle_judge):
    """PostgreSQL text cannot hold NUL: such names are INVALID_ARGUMENT, never a database error."""
    settings = ServerSettings(listen="127.0.0.1:0", db=schema_url, shutdown_grace_s=1.0)
    async with (
        background_server(settings) as address,
        grpc.aio.insecure_channel(address) as channel,
    ):
        stub = rank_pb2_grpc.RankServiceStub(channel)
        for request in (
            rank_pb2.CreateJobRequest(spec=make_spec(n=4), request_id="a\x00b"),
            rank_pb2.CreateJobRequest(spec=make_spec(n=4, judges=[oracle_judge(model="m\x00")])),
        ):
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await stub.CreateJob(request)
            assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            assert "must not contain NUL characters" in refused.value.details()
