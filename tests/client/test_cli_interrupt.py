"""Ctrl-C during `tierank rank` (issue 22, item 19): one line says what becomes of the job and
how to follow or cancel it; a job on the embedded server is cancelled rather than left to
spend, unseen, whenever a later command starts that server again; and a job left unfinished
anyway (its command was killed) goes on only when watched."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
from cli_process import (
    POOL,
    QUERY,
    REPO_ROOT,
    TIERANK,
    cli_environment,
    job_name_in,
    tierank,
)

from tierank.client import Client, LocalServer, job_spec
from tierank.v1 import rank_pb2

pytestmark = pytest.mark.long_module

EXIT_INTERRUPTED = 130
# One call in flight, each taking a while: the job is surely mid-way when Ctrl-C comes.
SLOW_JUDGE = "oracle?latency_ms=300"


def _ignore_ctrl_c() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def interrupt_rank_mid_job(
    *args: str, signum: int = signal.SIGINT, ctrl_c_ignored: bool = False
) -> tuple[int, str]:
    """Start `tierank rank`, wait for its first verdict, then signal its process group as a
    terminal does (Ctrl-C: SIGINT; closing the terminal: SIGHUP); its exit status and stderr."""
    process = subprocess.Popen(
        [*TIERANK, "rank", POOL, "--query", QUERY, "--judge", SLOW_JUDGE,
         "--max-in-flight", "1", "--format", "trec", *args],
        cwd=REPO_ROOT, env=cli_environment(), stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE, text=True, start_new_session=True,
        # As a shell starts a script's background job: Ctrl-C ignored.
        preexec_fn=_ignore_ctrl_c if ctrl_c_ignored else None,
    )  # fmt: skip
    assert process.stderr is not None
    seen = []
    for line in process.stderr:
        seen.append(line)
        if " verdict " in line:
            break
    os.killpg(process.pid, signum)
    rest = process.stderr.read()
    return process.wait(timeout=60), "".join(seen) + rest


@pytest.mark.parametrize(
    "signum", [signal.SIGINT, signal.SIGHUP, signal.SIGTERM], ids=["ctrl-c", "hangup", "kill"]
)
def test_ctrl_c_on_the_embedded_server_cancels_the_job_and_says_so(
    tmp_path: Path, signum: int
) -> None:
    db = tmp_path / "tierank.db"
    status, stderr = interrupt_rank_mid_job("--db", str(db), signum=signum)

    assert status == EXIT_INTERRUPTED, stderr
    last = stderr.splitlines()[-1]
    name = stderr.split()[2].rstrip(":")
    assert last == (
        f"tierank rank: interrupted; cancelled {name}, since the embedded server stops with this"
        f" command; its tiers so far: `tierank watch {name} --db {db}`"
    )
    # A later embedded server on the same database does not take the job up again.
    with LocalServer(db=db) as later, Client(later.address) as client:
        before = client.get_job(name)
        watched = tierank("watch", name, "--server", later.address)
        after = client.get_job(name)
    assert before.state == rank_pb2.JOB_STATE_CANCELLED
    assert after.last_sequence == before.last_sequence
    assert after.stats.judge_calls == before.stats.judge_calls
    assert watched.returncode == 0 and "(cancelled)" in watched.stdout


def test_ctrl_c_with_a_server_leaves_the_job_running_and_names_the_commands(
    tierank_server: str,
) -> None:
    status, stderr = interrupt_rank_mid_job("--server", tierank_server)

    assert status == EXIT_INTERRUPTED, stderr
    last = stderr.splitlines()[-1]
    name = stderr.split()[2].rstrip(":")
    follow = last.split("`")[1]
    assert last == (
        f"tierank rank: interrupted; {name} goes on at {tierank_server}: follow it with"
        f" `{follow}`, or stop it with `tierank cancel {name} --server {tierank_server}`"
    )
    assert follow.startswith(f"tierank watch {name} --after ")
    # The command it names works as printed, from the event after the last one shown.
    watched = tierank(*follow.split()[1:])
    assert watched.returncode == 0, watched.stderr
    after = int(follow.split("--after ")[1].split()[0])
    assert watched.stdout.startswith(f"#{after + 1} ")


def events_of(name: str, db: Path) -> int:
    """The job's event count as `tierank jobs` on the embedded server lists it."""
    listed = tierank("jobs", "--db", str(db))
    assert listed.returncode == 0, listed.stderr
    row = next(r for r in map(str.split, listed.stdout.splitlines()) if r and r[0] == name)
    assert row[1:3] == ["running", "-"]
    return int(row[4])


def test_a_job_left_unfinished_goes_on_only_when_watched(tmp_path: Path) -> None:
    db = tmp_path / "tierank.db"
    pool = [json.loads(line) for line in Path(POOL).read_text().splitlines() if line.strip()]
    spec = job_spec(QUERY, pool, judges=["oracle?latency_ms=100"], max_in_flight=1)
    server = LocalServer(db=db)
    server.start()
    with Client(server.address) as client:
        name = client.create_job(spec).name
        for event in client.watch_job(name):
            if event.sequence >= 4:
                break
    assert server.pid is not None
    os.kill(server.pid, signal.SIGKILL)  # as a killed command leaves its embedded server's job
    server.stop()

    left = events_of(name, db)
    # Other embedded commands neither run it nor pay for its calls...
    assert events_of(name, db) == left
    assert tierank("usage", "--db", str(db)).returncode == 0
    assert events_of(name, db) == left
    # ...until it is asked for.
    watched = tierank("watch", name, "--after", str(left), "--db", str(db))
    assert watched.returncode == 0, watched.stderr
    assert watched.stdout.startswith(f"#{left + 1} ")
    assert "completed" in watched.stdout.splitlines()[-1]


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP], ids=["kill", "hangup"])
def test_a_command_started_with_ctrl_c_ignored_still_ends_on_a_kill(
    tmp_path: Path, signum: int
) -> None:
    status, stderr = interrupt_rank_mid_job(
        "--db", str(tmp_path / "tierank.db"), signum=signum, ctrl_c_ignored=True
    )
    assert status == EXIT_INTERRUPTED, stderr
    assert "interrupted; cancelled jobs/" in stderr


def _exited(pid: int, within_s: float) -> bool:
    """Whether process `pid` (not a child of ours: its parent was killed) ends within
    `within_s` seconds; a zombie left for an init that does not reap counts as ended."""
    give_up_at = time.monotonic() + within_s
    while time.monotonic() < give_up_at:
        try:
            os.kill(pid, 0)
            state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
        except (ProcessLookupError, FileNotFoundError):
            return True
        except OSError:
            state = ""  # no /proc here: only its disappearance tells
        if state == "Z":
            return True
        time.sleep(0.05)
    return False


def test_a_command_killed_with_sigkill_takes_its_embedded_server_with_it(
    tmp_path: Path,
) -> None:
    # Issue 34, item 7: the server outlived its command, still spending, and kept the database
    # from any later command.
    db = tmp_path / "tierank.db"
    process = subprocess.Popen(
        [*TIERANK, "rank", POOL, "--query", QUERY, "--judge", SLOW_JUDGE,
         "--max-in-flight", "1", "--format", "trec", "--db", str(db)],
        cwd=REPO_ROOT, env=cli_environment(), stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE, text=True, start_new_session=True,
    )  # fmt: skip
    assert process.stderr is not None
    name = job_name_in(process.stderr.readline())
    for line in process.stderr:
        if " verdict " in line:
            break
    # The embedded server announces itself beside the database: "HOST:PORT PID".
    server_pid = int(Path(f"{db}.address").read_text().split()[1])
    process.kill()  # SIGKILL to the command alone, as an OOM killer or `kill -9` sends it
    process.wait(timeout=60)
    process.stderr.close()
    try:
        assert _exited(server_pid, within_s=60), "the embedded server outlived its command"
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(server_pid, signal.SIGKILL)  # started by this test's command, never left

    # The database is free for the next command, which finds the job as it was left.
    assert events_of(name, db) > 0
