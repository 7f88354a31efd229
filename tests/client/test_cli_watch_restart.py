"""`tierank watch` across a real server restart (issue 22, item 20): the stream is resumed with
backoff for --reconnect-for seconds, gap-free; a server that stays away ends the command with
one line naming the `tierank watch J --after N` that resumes; --timeout ends with one line."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

from cli_process import (
    POOL,
    QUERY,
    REPO_ROOT,
    TIERANK,
    cli_environment,
    rest_of,
    unused_address,
)

from tierank.client import Client, LocalServer, job_spec

EXIT_SERVER_ERROR = 1
EXIT_TIMED_OUT = 124
# Longer than the ~3.7 s a watch used to bridge before giving up.
RESTART_PAUSE_SECONDS = 5.0


def slow_job(address: str, latency_ms: int = 150) -> str:
    """A job of many one-at-a-time calls, each taking a while: it outlives a restart."""
    pool = [json.loads(line) for line in Path(POOL).read_text().splitlines() if line.strip()]
    spec = job_spec(QUERY, pool, judges=[f"oracle?latency_ms={latency_ms}"], max_in_flight=1)
    with Client(address) as client:
        return client.create_job(spec).name


def start_watch(name: str, address: str, *options: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [*TIERANK, "watch", name, "--server", address, *options],
        cwd=REPO_ROOT, env=cli_environment(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True,
    )  # fmt: skip


def read_events(watch: subprocess.Popen[str], count: int) -> list[str]:
    assert watch.stdout is not None
    return [watch.stdout.readline() for _ in range(count)]


def test_watch_bridges_a_server_restart_on_the_same_port(tmp_path: Path) -> None:
    address = unused_address()
    db = tmp_path / "tierank.db"
    server = LocalServer(db=db, listen=address)
    server.start()
    try:
        name = slow_job(address)
        watch = start_watch(name, address)  # the default --reconnect-for: 60 s
        first = read_events(watch, 3)
        server.stop()
        time.sleep(RESTART_PAUSE_SECONDS)
        server = LocalServer(db=db, listen=address)
        server.start()
        rest, stderr = rest_of(watch)
    finally:
        server.stop()

    assert watch.returncode == 0, stderr
    lines = first + rest.splitlines(keepends=True)
    sequences = [int(line.split()[0].lstrip("#")) for line in lines]
    assert sequences == list(range(1, len(lines) + 1))  # no gap, no duplicate
    assert " completed " in lines[-1] or lines[-1].split()[1] == "completed"
    assert stderr.splitlines() == [
        "connection lost (UNAVAILABLE); resuming for up to 60s (--reconnect-for)"
    ]


def test_a_server_that_stays_away_ends_the_watch_with_the_command_that_resumes(
    tmp_path: Path,
) -> None:
    address = unused_address()
    server = LocalServer(db=tmp_path / "tierank.db", listen=address)
    server.start()
    try:
        name = slow_job(address)
        watch = start_watch(name, address, "--reconnect-for", "2")
        shown = read_events(watch, 3)
    finally:
        server.stop()
    rest, stderr = rest_of(watch, timeout=60)

    last = int((shown + rest.splitlines())[-1].split()[0].lstrip("#"))
    assert watch.returncode == EXIT_SERVER_ERROR
    assert stderr.splitlines() == [
        "connection lost (UNAVAILABLE); resuming for up to 2s (--reconnect-for)",
        "tierank watch: lost the server for 2s (--reconnect-for); once it is back, follow"
        f" {name} with `tierank watch {name} --after {last} --server {address}`",
    ]


def test_watch_timeout_ends_with_one_line_and_status_124(tmp_path: Path) -> None:
    with LocalServer(db=tmp_path / "tierank.db") as server:
        name = slow_job(server.address, latency_ms=2000)
        watch = start_watch(name, server.address, "--timeout", "1")
        out, stderr = rest_of(watch, timeout=60)
        with Client(server.address) as client:
            client.cancel_job(name)

    last = int(out.splitlines()[-1].split()[0].lstrip("#"))
    assert watch.returncode == EXIT_TIMED_OUT
    assert stderr == (
        f"tierank watch: stopped after --timeout 1s; {name} goes on at {server.address}: follow"
        f" it with `tierank watch {name} --after {last} --server {server.address}`, or stop it"
        f" with `tierank cancel {name} --server {server.address}`\n"
    )
