"""Command line: ``python -m tierank.bench.ranking run|curve|calibrate [options]``."""

from __future__ import annotations

import argparse
import os
import shlex
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from tierank.bench.ranking.calibration import calibrate
from tierank.bench.ranking.curve import DEFAULT_MULTIPLES, DEFAULT_SCENARIOS, run_curve
from tierank.bench.ranking.curve_report import write_curve
from tierank.bench.ranking.data import (
    DEFAULT_PASSAGES,
    DEFAULT_QRELS,
    DEFAULT_RUN,
    DEFAULT_TOPICS,
    Query,
    load_queries,
)
from tierank.bench.ranking.experiment import Task, ideal_ndcg, run_all
from tierank.bench.ranking.judges import PANELS
from tierank.bench.ranking.methods import DEFAULT_METHODS, METHODS, SMOKE_METHODS
from tierank.bench.ranking.report import write_outputs
from tierank.server.judges.simulated import STRONG, WEAK, JudgeProfile

HERE = Path(__file__).resolve().parent
SMOKE_QUERIES = 3
# Published non-transitivity of GPT-4-class and weak judges: the calibration targets.
CYCLE_TARGETS = {STRONG.name: (0.04, 0.08), WEAK.name: (0.21, 0.23)}


def _data_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--topics", type=Path, default=DEFAULT_TOPICS)
    parser.add_argument("--qrels", type=Path, default=DEFAULT_QRELS)
    parser.add_argument("--run", type=Path, default=DEFAULT_RUN, help="first-stage TREC run")
    parser.add_argument(
        "--passages",
        type=Path,
        default=DEFAULT_PASSAGES,
        help="passage texts: rank_llm retrieve-results .json or {docid, contents} .jsonl",
    )
    parser.add_argument("--depth", type=int, default=100, help="candidates per query")
    parser.add_argument("--queries", type=int, default=0, help="use the first N queries (0: all)")


def _queries(args: argparse.Namespace) -> list[Query]:
    queries = load_queries(args.topics, args.qrels, args.run, args.passages, args.depth)
    return queries[: args.queries] if args.queries else queries


def calibration_lines(
    queries: Sequence[Query], profiles: Sequence[JudgeProfile], seeds: Sequence[int]
) -> list[str]:
    lines = []
    for profile in profiles:
        result = calibrate(queries, profile, seeds)
        low, high = CYCLE_TARGETS.get(profile.name, (0.0, 1.0))
        within = "within" if low <= result.cyclic_share <= high else "**outside**"
        by_k = ", ".join(f"k={k}: {share:.3f}" for k, share in result.discordance_by_k.items())
        lines.append(
            f"- {profile.name}: cyclic triples (all pairs of the top-{20} asked once, k=2) "
            f"{result.cyclic_share:.3f} over seeds {list(seeds)} "
            f"(per seed {', '.join(f'{s:.3f}' for s in result.cyclic_share_by_seed)}; "
            f"target {low:.2f}–{high:.2f}: {within}); misordered pairs of different grades "
            f"per call: {by_k}"
        )
    return lines


def _run(args: argparse.Namespace, command: str) -> None:
    if args.smoke:
        args.queries = args.queries or SMOKE_QUERIES
        scenarios = args.scenarios or ["oracle", "strong"]
        seeds = list(range(args.seeds or 1))
        out = args.out or HERE / "results" / "smoke"
    else:
        scenarios = args.scenarios or list(DEFAULT_METHODS)
        seeds = list(range(args.seeds or 20))
        out = args.out or HERE
    queries = _queries(args)
    tasks = [
        Task(scenario, method, seed)
        for scenario in scenarios
        for method in (
            args.methods or (SMOKE_METHODS if args.smoke else DEFAULT_METHODS.get(scenario, []))
        )
        for seed in seeds
    ]
    unknown = sorted({t.method for t in tasks if t.method not in METHODS})
    if unknown:
        sys.exit(f"unknown methods {unknown}; known: {sorted(METHODS)}")
    started = time.perf_counter()
    records = run_all(tasks, queries, args.workers)
    elapsed = time.perf_counter() - started
    calibrated = [] if args.smoke else calibration_lines(queries, (STRONG, WEAK), seeds)
    settings = (
        f"Data: {args.run.name} with {args.qrels.name}. Judges: simulated from the human grades "
        "(server/judges/simulated.py explains the model; calibration below). "
        f"{len(queries)} queries × {len(seeds)} seeds, {args.depth} candidates per query, "
        f"top-10; {len(tasks)} (scenario, method, seed) runs in {elapsed:.0f} s "
        f"on {args.workers} worker(s)."
    )
    results_md = write_outputs(
        records, ideal_ndcg(queries), command, settings, calibrated, Path(out)
    )
    print(results_md.read_text(encoding="utf-8"))


def _curve(args: argparse.Namespace, command: str) -> None:
    queries = _queries(args)
    seeds = list(range(args.first_seed, args.first_seed + args.seeds))
    started = time.perf_counter()
    run = run_curve(queries, args.scenarios, seeds, args.multiples, args.workers)
    elapsed = time.perf_counter() - started
    settings = (
        f"Data: {args.run.name} with {args.qrels.name}. {len(queries)} queries × seeds "
        f"{seeds[0]}–{seeds[-1]}, {args.depth} candidates per query, top-10; "
        f"{len({(r.scenario, r.method, r.seed) for r in run.records})} (scenario, method, seed) "
        f"runs in {elapsed:.0f} s on {args.workers} worker(s)."
    )
    curve_md = write_curve(run, command, settings, args.out)
    print(curve_md.read_text(encoding="utf-8"))


def main(argv: Sequence[str] | None = None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = argparse.ArgumentParser(prog="python -m tierank.bench.ranking")
    commands = parser.add_subparsers(dest="command", required=True)
    run = commands.add_parser("run", help="run the benchmark and write RESULTS.md and plots")
    _data_arguments(run)
    run.add_argument("--seeds", type=int, default=0, help="number of seeds (default 20; smoke 1)")
    run.add_argument("--scenarios", nargs="+", choices=sorted(PANELS))
    run.add_argument("--methods", nargs="+", help=f"default per scenario; known: {list(METHODS)}")
    run.add_argument("--workers", type=int, default=min(2, os.cpu_count() or 1))
    run.add_argument("--out", type=Path, help="folder for RESULTS.md and results/")
    run.add_argument("--smoke", action="store_true", help="3 queries, 1 seed, few methods")
    curve = commands.add_parser(
        "curve", help="tierank at token budgets beside the baselines: CURVE.md and plots"
    )
    _data_arguments(curve)
    curve.add_argument("--seeds", type=int, default=20, help="number of seeds")
    curve.add_argument(
        "--first-seed", type=int, default=0, help="seeds from here on (e.g. 100: unseen ones)"
    )
    curve.add_argument(
        "--scenarios", nargs="+", choices=sorted(PANELS), default=list(DEFAULT_SCENARIOS)
    )
    curve.add_argument(
        "--multiples",
        nargs="+",
        type=float,
        default=list(DEFAULT_MULTIPLES),
        help="budgets as multiples of blitzrank-k10's mean input tokens per query",
    )
    curve.add_argument("--workers", type=int, default=min(2, os.cpu_count() or 1))
    curve.add_argument(
        "--out", type=Path, default=HERE, help="folder for CURVE.md and results/curve-*"
    )
    cal = commands.add_parser("calibrate", help="re-measure the simulated judges' calibration")
    _data_arguments(cal)
    cal.add_argument("--seeds", type=int, default=3)
    args = parser.parse_args(argv)
    command = shlex.join(["python", "-m", "tierank.bench.ranking", *argv])
    if args.command == "run":
        _run(args, command)
    elif args.command == "curve":
        _curve(args, command)
    else:
        seeds = list(range(args.seeds))
        print(
            "\n".join(calibration_lines(_queries(args), (STRONG, WEAK, *PANELS["ensemble"]), seeds))
        )


if __name__ == "__main__":
    main()
