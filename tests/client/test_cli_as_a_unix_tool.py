"""The `tierank` process as a shell sees it: pipes closed early, servers that are not there,
broken configuration, the embedded-server default, and `serve` as the server's own command."""

from __future__ import annotations

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
    unused_address,
)

from tierank.client import Client
from tierank.client.local_server import failure_reason

pytestmark = pytest.mark.long_module

EXIT_BROKEN_PIPE = 141


def run_into_closed_pipe(*args: str) -> tuple[int, str]:
    """Run tierank with stdout a pipe whose reader is already gone (`... | head -0`)."""
    process = subprocess.Popen(
        [*TIERANK, *args],
        cwd=REPO_ROOT,
        env=cli_environment(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert process.stdout is not None and process.stderr is not None
    process.stdout.close()
    stderr = process.stderr.read().decode()
    return process.wait(timeout=60), stderr


def finished_job(server: str) -> str:
    result = tierank("rank", POOL, "--query", QUERY, "--server", server, "--format", "json")
    assert result.returncode == 0, result.stderr
    return job_name_in(result.stderr)


def test_watch_into_a_closed_pipe_exits_quietly(tierank_server: str) -> None:
    name = finished_job(tierank_server)
    status, stderr = run_into_closed_pipe("watch", name, "--after", "5", "--server", tierank_server)
    assert status == EXIT_BROKEN_PIPE
    assert stderr == ""


def test_rank_trec_into_a_closed_pipe_exits_quietly(tierank_server: str) -> None:
    status, stderr = run_into_closed_pipe(
        "rank", POOL, "--query", QUERY, "--format", "trec", "--server", tierank_server
    )
    assert status == EXIT_BROKEN_PIPE
    assert "Traceback" not in stderr and "BrokenPipe" not in stderr
    assert "completed (settled)" in stderr  # the progress log was not cut short


def test_rank_table_into_a_closed_pipe_exits_quietly(tierank_server: str) -> None:
    # The table is written by rich, whose own broken-pipe handling exits with status 1.
    status, stderr = run_into_closed_pipe(
        "rank", POOL, "--query", QUERY, "--server", tierank_server
    )
    assert status == EXIT_BROKEN_PIPE
    assert "Traceback" not in stderr and "BrokenPipe" not in stderr


def test_watch_piped_into_head_stops_after_what_head_took(tierank_server: str) -> None:
    name = finished_job(tierank_server)
    shell = f"{' '.join(TIERANK)} watch {name} --after 5 --server {tierank_server} | head -1"
    result = subprocess.run(
        ["bash", "-c", shell + "; echo status ${PIPESTATUS[0]} >&2"],
        capture_output=True, text=True, cwd=REPO_ROOT, env=cli_environment(), timeout=60,
    )  # fmt: skip
    assert result.stdout.startswith("#6 ")
    assert len(result.stdout.splitlines()) == 1
    # Whether the writer noticed depends on timing; either way it says nothing.
    assert result.stderr.strip() in ("status 0", f"status {EXIT_BROKEN_PIPE}")


def test_a_server_never_reached_is_named_once() -> None:
    address = unused_address()
    commands = {"watch": ["watch", "jobs/x"], "rank": ["rank", POOL, "--query", QUERY]}
    started = time.monotonic()
    processes = {
        name: subprocess.Popen(
            [*TIERANK, *args, "--server", address],
            cwd=REPO_ROOT,
            env=cli_environment({"TIERANK_CONNECT_TIMEOUT": "2"}),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for name, args in commands.items()
    }
    for name, process in processes.items():
        _, stderr = process.communicate(timeout=60)
        assert process.returncode == 1
        assert stderr.splitlines() == [
            f"tierank {name}: UNAVAILABLE: cannot reach {address} (no server answered in 2s)"
        ]
    assert time.monotonic() - started < 30


def test_the_client_library_names_a_server_never_reached() -> None:
    reconnects: list[int] = []
    address = unused_address()
    with Client(address, on_reconnect=lambda attempt, error: reconnects.append(attempt)) as client:
        try:
            list(client.watch_job("jobs/x"))
        except Exception as error:
            message = str(error)
    assert message.startswith(f"UNAVAILABLE: cannot reach {address}")
    assert reconnects == []  # a connection that never existed is not "lost"


def test_broken_judges_config_is_one_line(tmp_path: Path) -> None:
    config = tmp_path / "judges.toml"
    for content, expected in (("x = [\n", "not valid TOML"), ("[openai]\nkey = 1\n", "'openai'")):
        config.write_text(content)
        result = tierank(
            "rank", POOL, "--query", QUERY, "--db", str(tmp_path / "db"),
            env={"TIERANK_JUDGES_CONFIG": str(config)},
        )  # fmt: skip
        assert result.returncode == 1
        lines = result.stderr.splitlines()
        assert len(lines) == 1, result.stderr
        assert str(config) in lines[0] and expected in lines[0]


def test_the_reason_a_server_failed_is_its_last_message() -> None:
    traceback = (
        "  + Exception Group Traceback (most recent call last):\n"
        '  |   File "x.py", line 1, in <module>\n'
        "  | ExceptionGroup: unhandled errors in a TaskGroup (1 sub-exception)\n"
        "  +-+---------------- 1 ----------------\n"
        "    | Traceback (most recent call last):\n"
        "    | tomllib.TOMLDecodeError: Invalid value (at end of document)\n"
        "    +------------------------------------\n"
    )
    assert failure_reason(traceback) == "Invalid value (at end of document)"
    log = '{"event": "serving", "level": "info"}\n{"event": "disk full", "level": "error"}\n'
    assert failure_reason(log) == "disk full"
    assert failure_reason("tierank: database x is locked\n") == "tierank: database x is locked"


def test_missing_input_files_are_one_line(tmp_path: Path) -> None:
    for args in (
        ["rank", str(tmp_path / "nope.jsonl"), "--query", "q"],
        ["rank", POOL, "--query", "q", "--output", str(tmp_path / "no" / "dir" / "out")],
        ["eval", str(tmp_path / "run.trec"), "--qrels", str(tmp_path / "q")],
    ):
        result = tierank(*args, "--db", str(tmp_path / "db"))
        assert result.returncode == 2, result.stderr
        assert len(result.stderr.splitlines()) == 1, result.stderr
        assert "cannot" in result.stderr


def test_jobs_watch_cancel_use_the_embedded_server_on_the_default_database(
    tmp_path: Path,
) -> None:
    data = {"XDG_DATA_HOME": str(tmp_path)}
    ranked = tierank("rank", POOL, "--query", QUERY, "--top-k", "3", env=data)
    assert ranked.returncode == 0, ranked.stderr
    name = job_name_in(ranked.stderr)
    assert (tmp_path / "tierank" / "tierank.db").exists()

    listed = tierank("jobs", env=data)
    assert listed.returncode == 0, listed.stderr
    # A header, then one line per job however long its query, nothing cut.
    header, *body = listed.stdout.splitlines()
    assert header.split()[0] == "name"
    assert len(body) == 1 and body[0].split()[0] == name and body[0].rstrip().endswith(QUERY)
    watched = tierank("watch", name, env=data)
    assert watched.returncode == 0, watched.stderr
    assert watched.stdout.splitlines()[-1].startswith(f"#{len(watched.stdout.splitlines())} ")
    cancelled = tierank("cancel", name, env=data)
    assert cancelled.returncode == 0, cancelled.stderr
    assert cancelled.stdout.strip() == f"{name}: succeeded (settled)"
    empty = tierank("jobs", "--state", "running", env=data)
    assert empty.stdout.strip() == "no running jobs"


def test_serve_help_is_the_servers_own() -> None:
    served = tierank("serve", "--help")
    server = subprocess.run(
        [*TIERANK[:1], "-m", "tierank.server", "--help"],
        capture_output=True, text=True, cwd=REPO_ROOT, env=cli_environment(), timeout=60,
    )  # fmt: skip
    assert served.returncode == 0
    assert served.stdout == server.stdout
    for flag in ("--judges-config", "--max-message-mb", "--metrics-listen", "--log-format"):
        assert flag in served.stdout


def test_serve_accepts_every_server_flag(tmp_path: Path) -> None:
    config = tmp_path / "judges.toml"
    config.write_text("")
    ready = tmp_path / "ready"
    server = subprocess.Popen(
        [*TIERANK, "serve", "--listen", "127.0.0.1:0", "--db", str(tmp_path / "served.db"),
         "--judges-config", str(config), "--max-message-mb", "8", "--shutdown-grace", "1",
         "--log-level", "warning", "--log-format", "console", "--ready-file", str(ready)],
        cwd=REPO_ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 30
        while not (ready.exists() and ready.read_text().strip()) and time.monotonic() < deadline:
            assert server.poll() is None, server.communicate()[1]
            time.sleep(0.05)
        listed = tierank("jobs", "--server", ready.read_text().strip())
        assert listed.returncode == 0, listed.stderr
    finally:
        server.terminate()
        server.wait(timeout=15)
