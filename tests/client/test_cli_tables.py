"""Tables never cut what users copy (issue 22, item 21): on an 80-column terminal a table too
wide for it is printed wider (the terminal wraps it) rather than cut; in a pipe every row is
one plain line a script can split."""

from __future__ import annotations

import json
import os
import pty
import subprocess
from pathlib import Path

from cli_process import POOL, QUERY, REPO_ROOT, TIERANK, cli_environment, tierank

from tierank.client import Client, job_spec


def on_terminal(*args: str, columns: int = 80) -> str:
    """The command's output on a pseudo-terminal `columns` wide, escape sequences removed."""
    leader, follower = pty.openpty()
    process = subprocess.Popen(
        [*TIERANK, *args], cwd=REPO_ROOT, env=cli_environment({"COLUMNS": str(columns)}),
        stdout=follower, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    os.close(follower)
    chunks = []
    while True:
        try:
            chunk = os.read(leader, 65536)
        except OSError:  # the terminal is gone once the process exits
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(leader)
    assert process.wait(timeout=60) == 0
    text = b"".join(chunks).decode()
    return "".join(part.split("m", 1)[-1] for part in text.split("\x1b["))


def some_jobs(server: str, count: int = 2) -> list[str]:
    pool = [json.loads(line) for line in Path(POOL).read_text().splitlines() if line.strip()]
    spec = job_spec(f"{QUERY} and what the dance means to the hive", pool, top_k=3)
    with Client(server) as client:
        return [client.create_job(spec).name for _ in range(count)]


def test_jobs_on_an_80_column_terminal_shows_whole_names(tierank_server: str) -> None:
    names = some_jobs(tierank_server)
    shown = on_terminal("jobs", "--server", tierank_server)
    for name in names:
        assert name in shown


def test_eval_on_an_80_column_terminal_shows_whole_numbers(
    tierank_server: str, tmp_path: Path
) -> None:
    runs = []
    for index in range(3):
        run = tmp_path / f"a-rather-long-run-name-that-takes-room-{index}.trec"
        run.write_text("".join(f"q1 Q0 d{d} {d} {10 - d - index} r\n" for d in range(1, 9)))
        runs.append(str(run))
    qrels = tmp_path / "qrels"
    qrels.write_text("q1 0 d1 3\nq1 0 d2 1\nq1 0 d5 2\n")
    measures = [m for name in ("nDCG@10", "RR", "P@5", "R@5", "AP", "Rprec") for m in ("-m", name)]
    shown = on_terminal("eval", *runs, "--qrels", str(qrels), *measures, "--server", tierank_server)
    scored = tierank(
        "eval", *runs, "--qrels", str(qrels), *measures, "--json", "--server", tierank_server
    )
    for entry in json.loads(scored.stdout)["runs"]:
        for value in entry["measures"].values():
            assert f"{value['mean']:.4f}" in shown
    assert "…" not in shown


def test_a_piped_table_is_plain_lines(tierank_server: str) -> None:
    names = some_jobs(tierank_server)
    result = tierank("jobs", "--server", tierank_server, env={"COLUMNS": "80"})
    lines = result.stdout.splitlines()
    assert lines[0].split()[:3] == ["name", "state", "reason"]
    rows = {line.split()[0]: line for line in lines[1:]}
    assert set(names) <= set(rows)
    assert "─" not in result.stdout and "…" not in result.stdout


def test_rank_in_a_pipe_ends_with_its_summary_on_one_line(tierank_server: str) -> None:
    result = tierank("rank", POOL, "--query", QUERY, "--top-k", "3", "--server", tierank_server)
    assert result.returncode == 0, result.stderr
    summary = result.stdout.splitlines()[-1]
    assert summary.startswith("succeeded (settled): ") and "critical path" in summary
