"""The `tierank` command line, run as a real subprocess (`python -m tierank.client`)."""

from __future__ import annotations

import argparse
import json
import os
import pty
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from cli_process import POOL, QUERY, REPO_ROOT, job_name_in, tierank
from shared_data import TREC_DL

from tierank.client import Client, JobSpec, LocalServer, job_spec, judge


def test_rank_with_embedded_server_prints_json(tmp_path: Path) -> None:
    db = tmp_path / "embedded.db"
    result = tierank(
        "rank", POOL, "--query", QUERY, "--format", "json", env={"TIERANK_DB": str(db)}
    )

    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout)
    assert summary["state"] == "succeeded"
    assert summary["completion_reason"] == "settled"
    ids = [i for tier in summary["tiers"] for i in tier["candidate_ids"]]
    assert sorted(ids) == sorted(f"bee-{n:02d}" for n in range(1, 31))
    assert summary["stats"]["judge_calls"] > 0
    # Progress went to stderr, one line per event; the embedded server used the given db.
    assert result.stderr.splitlines()[0].startswith("#1 accepted jobs/")
    assert db.exists()


def test_rank_writes_a_trec_run(tierank_server: str, tmp_path: Path) -> None:
    run_file = tmp_path / "run.trec"
    result = tierank(
        "rank", POOL, "--query", QUERY, "--judge", "oracle", "--k", "5", "--qid", "q7",
        "--run-tag", "bees", "--format", "trec", "--output", str(run_file),
        "--server", tierank_server,
    )  # fmt: skip

    assert result.returncode == 0, result.stderr
    assert result.stdout == ""
    rows = [line.split() for line in run_file.read_text().splitlines()]
    assert len(rows) == 30
    assert {(r[0], r[1], r[5]) for r in rows} == {("q7", "Q0", "bees")}
    assert [int(r[3]) for r in rows] == list(range(1, 31))
    scores = [float(r[4]) for r in rows]
    assert scores == sorted(scores, reverse=True)
    assert len({r[2] for r in rows}) == 30


def test_rank_samples_each_judge_several_times(tierank_server: str) -> None:
    result = tierank(
        "rank", POOL, "--query", QUERY, "--judge", "oracle", "--samples", "3",
        "--ensemble", "adaptive", "--top-k", "5", "--format", "json", "--server", tierank_server,
    )  # fmt: skip

    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout)
    assert summary["completion_reason"] == "settled"
    calls = {j["judge"]: j.get("calls", 0) for j in summary["stats"]["judges"]}
    assert sorted(calls) == ["oracle#1", "oracle#2", "oracle#3"]
    # The adaptive quorum is the first two copies; the third is asked only on disputes.
    assert calls["oracle#1"] > 0 and calls["oracle#2"] > 0
    assert sum(calls.values()) == summary["stats"]["judge_calls"]


def test_rank_table_then_jobs_watch_list_it(tierank_server: str) -> None:
    ranked = tierank("rank", POOL, "--query", QUERY, "--server", tierank_server, "--seed", "3")
    assert ranked.returncode == 0, ranked.stderr
    assert "bee-26" in ranked.stdout
    assert "succeeded (settled): 30/30 settled" in ranked.stdout
    name = job_name_in(ranked.stderr)
    assert name.startswith("jobs/")

    listed = tierank("jobs", "--state", "succeeded", env={"TIERANK_SERVER": tierank_server})
    assert listed.returncode == 0, listed.stderr
    assert name in listed.stdout

    watched = tierank("watch", name, "--after", "1", "--server", tierank_server)
    assert watched.returncode == 0, watched.stderr
    lines = watched.stdout.splitlines()
    assert lines[0].startswith("#2 ")
    assert lines[-1].startswith(f"#{len(lines) + 1} completed (settled)")


def test_cancel_command(tierank_server: str, slow_spec: JobSpec) -> None:
    with Client(tierank_server) as client:
        name = client.create_job(slow_spec).name
    result = tierank("cancel", name, "--server", tierank_server)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == f"{name}: cancelled"


def test_watch_shows_calls_abandoned_by_a_cancel(tierank_server: str) -> None:
    # Both judges see each first-wave batch; only the fast one answers before the cancel.
    pool = [
        {"id": f"d{i}", "text": f"passage {i} about bees", "metadata": {"score": str(20 - i)}}
        for i in range(20)
    ]
    judges = [
        judge(f"oracle:{speed}", options={"noise": "0", "latency_ms": latency})
        for speed, latency in (("fast", "1"), ("slow", "60000"))
    ]
    with Client(tierank_server) as client:
        name = client.create_job(job_spec(QUERY, pool, judges=judges, ensemble="all")).name
        time.sleep(0.5)
        client.cancel_job(name)
    watched = tierank("watch", name, "--server", tierank_server)
    assert watched.returncode == 0, watched.stderr
    last = watched.stdout.splitlines()[-1]
    assert "(cancelled)" in last and "2 judge calls, 2 abandoned," in last


@pytest.mark.usefixtures("shared_data")
def test_rank_from_a_trec_run_and_topics(tierank_server: str) -> None:
    result = tierank(
        "rank", "--run", str(TREC_DL / "runs" / "run.rankllm.BM25.dl19.top100.trec"),
        "--passages", str(TREC_DL / "passages" / "dl19-rankllm-union-passages.jsonl"),
        "--topics", str(TREC_DL / "topics.dl19-passage.txt"), "--qid", "1037798",
        "--top-k", "5", "--k", "20", "--format", "json", "--server", tierank_server,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout)
    assert summary["query"] == "who is robert gray"
    assert sum(len(t["candidate_ids"]) for t in summary["tiers"]) == 100


def test_invalid_spec_is_a_usage_error_stated_once(tierank_server: str) -> None:
    result = tierank("rank", POOL, "--query", QUERY, "--k", "1", "--server", tierank_server)
    assert result.returncode == 2
    # Named by the flag that set it, not by the request's field (issue 34, item 19).
    assert result.stderr == "tierank rank: --k: must be between 2 and 20\n"


def test_unknown_job_exits_1(tierank_server: str) -> None:
    result = tierank("watch", "jobs/nope", "--server", tierank_server)
    assert result.returncode == 1
    assert "NOT_FOUND" in result.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["rank", POOL], "--query"),
        (["rank", "--run", POOL], "--passages and --qid"),
        (["rank", "missing.jsonl", "--query", "q"], "cannot read missing.jsonl"),
        (["rank", POOL, "--query", "q", "--rubric", "@missing.txt"], "--rubric: cannot read"),
        (["rank", POOL, "--query", "q", "--format", "xml"], "invalid choice"),
        (["watch"], "NAME"),
    ],
)
def test_usage_errors_exit_2(args: list[str], message: str) -> None:
    result = tierank(*args)
    assert result.returncode == 2
    assert message in result.stderr


def test_every_flag_has_help() -> None:
    from tierank.client.cli import build_parser

    def check(parser: argparse.ArgumentParser, command: str) -> None:
        for action in parser._actions:
            assert action.help, f"{command} {action.dest} has no help"
            if isinstance(action, argparse._SubParsersAction):
                for name, subparser in action.choices.items():
                    check(subparser, f"{command} {name}")

    check(build_parser(), "tierank")


def test_serve_runs_the_server_until_sigterm(tmp_path: Path) -> None:
    ready = tmp_path / "ready"
    server = subprocess.Popen(
        [sys.executable, "-m", "tierank.client", "serve", "--listen", "127.0.0.1:0",
         "--db", str(tmp_path / "served.db"), "--ready-file", str(ready)],
        cwd=REPO_ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 30
        while not (ready.exists() and ready.read_text().strip()) and time.monotonic() < deadline:
            assert server.poll() is None
            time.sleep(0.05)
        listed = tierank("jobs", "--server", ready.read_text().strip())
        assert listed.returncode == 0, listed.stderr
    finally:
        server.send_signal(signal.SIGTERM)
        assert server.wait(timeout=15) == 0


def test_rank_on_a_terminal_shows_live_progress(tierank_server: str) -> None:
    # stdout and stderr on a pseudo-terminal: the live display replaces the line-per-event log.
    controller, terminal = pty.openpty()
    process = subprocess.Popen(
        [sys.executable, "-m", "tierank.client", "rank", POOL, "--query", QUERY,
         "--server", tierank_server],
        cwd=REPO_ROOT, stdin=subprocess.DEVNULL, stdout=terminal, stderr=terminal,
        env={**os.environ, "COLUMNS": "120", "TERM": "xterm"},
    )  # fmt: skip
    os.close(terminal)
    output = b""
    while True:
        try:
            chunk = os.read(controller, 65536)
        except OSError:
            break
        if not chunk:
            break
        output += chunk
    os.close(controller)
    assert process.wait(timeout=30) == 0
    text = output.decode(errors="replace")
    assert "settled" in text and "critical path" in text
    assert "#1 accepted" not in text
    assert "bee-26" in text


def test_embedded_server_on_a_busy_db_exits_1(
    start_server: Callable[..., LocalServer], tmp_path: Path
) -> None:
    db = tmp_path / "busy.db"
    start_server(db)
    result = tierank("rank", POOL, "--query", QUERY, "--db", str(db))
    assert result.returncode == 1
    assert "exited with code" in result.stderr
    assert "pass --server" in result.stderr
