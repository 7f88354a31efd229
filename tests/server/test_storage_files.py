"""The database file: one server per file whatever its name, and damaged data reported plainly."""

from __future__ import annotations

import contextlib
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import grpc
import pytest

from tierank.client import LocalServer, LocalServerError
from tierank.v1 import rank_pb2, rank_pb2_grpc


def _stub(channel: grpc.Channel) -> rank_pb2_grpc.RankServiceStub:
    return rank_pb2_grpc.RankServiceStub(channel)


@pytest.mark.parametrize("link", ["symlink", "hard link"])
def test_a_second_server_through_another_name_of_the_file_is_refused(
    server_process, tmp_path: Path, link: str
):
    server_process.start()
    other_name = tmp_path / "elsewhere" / "same.db"
    other_name.parent.mkdir()
    if link == "symlink":
        other_name.symlink_to(server_process.db)
    else:
        os.link(server_process.db, other_name)
    with pytest.raises(LocalServerError) as refused:
        LocalServer(db=other_name).start()
    assert "another tierank server" in str(refused.value)


def test_an_unfinished_job_with_a_damaged_spec_fails_alone(server_process, make_spec, oracle_judge):
    spec = make_spec(n=30, top_k=0, judges=[oracle_judge(latency_ms="200")])
    address = server_process.start()
    with grpc.insecure_channel(address) as channel:
        damaged, intact = (
            _stub(channel).CreateJob(rank_pb2.CreateJobRequest(spec=spec)).name for _ in range(2)
        )
    server_process.kill9()
    with sqlite3.connect(server_process.db) as conn:
        conn.execute(
            "UPDATE jobs SET spec = x'ffff' WHERE job_id = ?", (damaged.removeprefix("jobs/"),)
        )

    address = server_process.start()
    with grpc.insecure_channel(address) as channel:
        stub = _stub(channel)
        events = list(stub.WatchJob(rank_pb2.WatchJobRequest(name=damaged), timeout=20))
        assert events[-1].failed.error.message.startswith("its stored spec is damaged")
        assert [e.sequence for e in events] == list(range(1, len(events) + 1))
        events = list(stub.WatchJob(rank_pb2.WatchJobRequest(name=intact), timeout=20))
        assert events[-1].completed.reason == rank_pb2.COMPLETION_REASON_SETTLED


def test_an_undecodable_row_is_reported_as_damaged_data(server_process, make_spec):
    address = server_process.start()
    with grpc.insecure_channel(address) as channel:
        name = _stub(channel).CreateJob(rank_pb2.CreateJobRequest(spec=make_spec(n=8))).name
        list(_stub(channel).WatchJob(rank_pb2.WatchJobRequest(name=name), timeout=20))
    assert server_process.terminate() == 0
    with sqlite3.connect(server_process.db) as conn:
        conn.execute("UPDATE jobs SET query = CAST(x'c328ff' AS TEXT)")

    address = server_process.start()
    with grpc.insecure_channel(address) as channel, pytest.raises(grpc.RpcError) as caught:
        _stub(channel).ListJobs(rank_pb2.ListJobsRequest())
    assert caught.value.code() == grpc.StatusCode.DATA_LOSS
    assert "damaged" in caught.value.details()
    assert "sqlite3" not in caught.value.details() and "Error" not in caught.value.details()


@pytest.mark.parametrize("damage", ["garbage", "truncated"])
def test_a_damaged_database_file_stops_the_start_with_one_clear_line(
    server_process, make_spec, damage: str
):
    address = server_process.start()
    with grpc.insecure_channel(address) as channel:
        for _ in range(3):
            _stub(channel).CreateJob(rank_pb2.CreateJobRequest(spec=make_spec(n=8)))
    assert server_process.terminate() == 0
    db = server_process.db
    if damage == "garbage":
        db.write_bytes(os.urandom(db.stat().st_size))
    else:
        with db.open("r+b") as file:
            file.truncate(50)

    result = subprocess.run(
        [sys.executable, "-m", "tierank.server", "--listen", "127.0.0.1:0", "--db", str(db)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 1
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    assert f"{db} is not a tierank database or is damaged" in lines[0]


def test_damage_found_at_start_up_is_logged(tmp_path: Path, make_spec):
    db = tmp_path / "tierank.db"
    with LocalServer(db=db) as server, grpc.insecure_channel(server.address) as channel:
        name = _stub(channel).CreateJob(rank_pb2.CreateJobRequest(spec=make_spec(n=8))).name
        list(_stub(channel).WatchJob(rank_pb2.WatchJobRequest(name=name), timeout=20))
    # Closed, not only committed: the last connection's close checkpoints the WAL, so the
    # cache's pages are the last ones of the file itself.
    with contextlib.closing(sqlite3.connect(db)) as conn, conn:
        conn.executemany(
            "INSERT INTO verdict_cache (key, payload) VALUES (?, ?)",
            [(f"k{i}", os.urandom(500)) for i in range(2000)],
        )
    page_size = 4096
    pages = db.stat().st_size // page_size
    with db.open("r+b") as file:  # a page of the cache, written last: the jobs stay readable
        file.seek((pages - 3) * page_size)
        file.write(b"\xa5" * page_size)

    with LocalServer(db=db) as server, grpc.insecure_channel(server.address) as channel:
        job = _stub(channel).GetJob(rank_pb2.GetJobRequest(name=name))
        assert job.state == rank_pb2.JOB_STATE_SUCCEEDED
        log = server.log_tail(50)
    assert '"event": "database is damaged' in log
