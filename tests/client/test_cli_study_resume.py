"""A study stopped with its embedded server by Ctrl-C, then resumed (issue 34, item 16): the
interrupt names `study report` too, `study show` says the study is not running rather than
give an ETA, and `study watch` ends as `study run` would have: the table, qrels.txt,
report.json and report.html."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path

from cli_process import REPO_ROOT, TIERANK, cli_environment, tierank
from test_cli_study import SYSTEMS, write_collection

EXIT_INTERRUPTED = 130
# Each judge call takes 2 s, one query at a time: the study is surely far from its end when
# the interrupt comes right after it started.
SLOW_JUDGE = "oracle?noise=0.2&latency_ms=2000"


def test_a_study_interrupted_on_the_embedded_server_resumes_with_its_results(
    tmp_path: Path,
) -> None:
    paths = write_collection(tmp_path, queries=3, docs=6)
    db = tmp_path / "t.db"
    process = subprocess.Popen(
        [*TIERANK, "study", "run", "--topics", str(paths["topics"]),
         "--passages", str(paths["passages"]),
         *(f for name in SYSTEMS for f in ("--run", f"{name}={paths[name]}")),
         "--depth", "6", "--top-k", "3", "--judge", SLOW_JUDGE, "--bands", "2:3,4:1",
         "--max-live", "1", "--db", str(db), "--output-dir", str(tmp_path / "never")],
        cwd=REPO_ROOT, env=cli_environment(), stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE, text=True, start_new_session=True,
    )  # fmt: skip
    assert process.stderr is not None
    started = process.stderr.readline()  # "studies/ID: 3 queries, N documents to judge"
    name = started.split(":")[0]
    assert name.startswith("studies/"), started
    os.killpg(process.pid, signal.SIGINT)
    rest = process.stderr.read()
    assert process.wait(timeout=60) == EXIT_INTERRUPTED, rest
    assert rest.splitlines()[-1] == (
        f"tierank study: interrupted; {name} stops with the embedded server and goes on when a"
        f" later command starts it: `tierank study watch {name} --db {db}` follows it and"
        f" writes its results when it ends, `tierank study report {name} --db {db}` writes what"
        f" is judged so far, `tierank study cancel {name} --db {db}` stops it"
    )

    shown = tierank("study", "show", name, "--db", str(db))
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.startswith(f"{name} not running: "), shown.stdout
    assert shown.stdout.splitlines()[0].endswith(
        f" · its server stopped with the command that ran it; `tierank study watch {name}"
        f" --db {db}` goes on"
    )
    assert "ETA" not in shown.stdout
    listed = tierank("study", "list", "--db", str(db))
    assert listed.stdout.startswith(f"{name} not running: "), listed.stdout

    out = tmp_path / "results"
    watched = tierank("study", "watch", name, "--db", str(db), "--output-dir", str(out))
    assert watched.returncode in (0, 4), watched.stderr
    assert "ranking by nDCG@10: " in watched.stdout
    assert f"wrote {out}/qrels.txt, report.json, report.html" in watched.stderr
    report = json.loads((out / "report.json").read_text())
    assert report["study"] == name and report["queries"]["total"] == 3
    assert report["state"] == "succeeded"
    assert (out / "qrels.txt").read_text() and (out / "report.html").exists()
    assert not (tmp_path / "never").exists()
    ended = tierank("study", "show", name, "--db", str(db))
    assert ended.stdout.startswith(f"{name} succeeded: "), ended.stdout
