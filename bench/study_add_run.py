"""Adding a system to a DL19 study that has ended, against judging all six from scratch.

    python -m tierank.bench.study_add_run                    # each system added in turn
    python -m tierank.bench.study_add_run --added repllama --depth 10 --seed 2

For each added system it runs, as a user would (processes, an embedded server on a fresh
SQLite database each): `tierank study run` with the other five DL19 runs, then `tierank study
add-run` with the sixth; and separately `tierank study run` with all six. Judge, passages and
labels as bench/study_dl19.py (the `oracle` seeing the NIST grade through noise 1.0). It prints
how much of the added system's top 10 the five-system pools had judged (Judged@10 before and
after), the documents and queries its round added, the judge calls of each step, and Kendall
tau of the study's system ordering against the human qrels' for both ways.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from tierank.bench.study_dl19 import DATA, RUNS, graded_passages

QRELS = DATA / "qrels.dl19-passage.txt"


def _tierank(*arguments: str) -> tuple[dict[str, Any], float]:
    """Run a `tierank study` command with --json; its report.json and its wall time."""
    started = time.monotonic()
    command = [sys.executable, "-m", "tierank.client", "study", *arguments, "--json"]
    result = subprocess.run(command, capture_output=True, text=True, check=False)
    wall = time.monotonic() - started
    if result.returncode not in (0, 4):
        raise SystemExit(
            f"{' '.join(arguments[:2])} failed ({result.returncode}):\n{result.stderr}"
        )
    return json.loads(result.stdout), wall


def _study_run(
    root: Path, systems: list[str], passages: Path, args: argparse.Namespace
) -> tuple[dict[str, Any], float]:
    return _tierank(
        "run", "--topics", str(DATA / "topics.dl19-passage.txt"), "--passages", str(passages),
        *(f for name in systems for f in ("--run", f"{name}={DATA / 'runs' / RUNS[name]}")),
        "--depth", str(args.depth), "--judge", args.judge, "--seed", str(args.seed),
        "--max-live", "16", "--human-qrels", str(QRELS),
        "--db", str(root / "study.db"), "--output-dir", str(root / "out"),
    )  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--added", choices=sorted(RUNS), action="append", help="default: each")
    parser.add_argument("--depth", type=int, default=20)
    parser.add_argument("--judge", default="oracle?noise=1.0")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    print(
        f"DL19, depth {args.depth}, judge {args.judge}, seed {args.seed}: five systems, then the"
        " sixth added (add-run), against all six from scratch"
    )
    print(
        f"{'added':<10} {'judged@10 before':>16} {'after':>6} {'docs added':>10}"
        f" {'queries':>7} {'calls: five':>11} {'+ add-run':>9} {'six from scratch':>16}"
        f" {'add-run / scratch':>17} {'tau: added':>10} {'scratch':>7} {'add-run wall':>12}"
    )
    with tempfile.TemporaryDirectory() as scratch:
        root = Path(scratch)
        passages = root / "passages.jsonl"
        graded_passages(passages)
        for added in args.added or list(RUNS):
            others = [name for name in RUNS if name != added]
            (root / "five").mkdir()
            five, _ = _study_run(root / "five", others, passages, args)
            after, add_wall = _tierank(
                "add-run", five["study"], f"{added}={DATA / 'runs' / RUNS[added]}",
                "--passages", str(passages), "--db", str(root / "five" / "study.db"),
                "--output-dir", str(root / "five" / "after"),
            )  # fmt: skip
            (root / "six").mkdir()
            six, _ = _study_run(root / "six", list(RUNS), passages, args)
            (pooling,) = [p for p in after["pooling"] if p["system"] == added]
            round_calls = after["cost"]["calls"] - five["cost"]["calls"]
            first_jobs = {query["job"] for query in five["per_query"]}
            judged_again = sum(1 for query in after["per_query"] if query["job"] not in first_jobs)
            print(
                f"{added:<10} {pooling['judged_before']:>16.3f} {pooling['judged_after']:>6.3f}"
                f" {pooling['documents_added']:>10}"
                f" {judged_again:>7}"
                f" {five['cost']['calls']:>11} {round_calls:>9} {six['cost']['calls']:>16}"
                f" {round_calls / six['cost']['calls']:>17.2f}"
                f" {after['agreement']['kendall_tau']:>10.3f}"
                f" {six['agreement']['kendall_tau']:>7.3f} {add_wall:>10.1f} s"
            )
            shutil.rmtree(root / "five")
            shutil.rmtree(root / "six")
    return 0


if __name__ == "__main__":
    sys.exit(main())
