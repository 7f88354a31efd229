"""A whole study on TREC DL19: the six systems' runs in shared/data pooled at a depth, judged by
the `oracle` judge seeing the human grades (through noise, or as one of the ranking benchmark's
simulated LLM judges), and the study's system ranking set against the human qrels' ranking.

    python -m tierank.bench.study_dl19                     # depth 20, noise 1.0, the six runs
    python -m tierank.bench.study_dl19 --judge 'oracle?noise=0.5' --depth 10 --seed 3
    python -m tierank.bench.study_dl19 --judge 'oracle?profile=strong'   # or weak, ...

It runs `tierank study run` as a user would (a process, an embedded server on a fresh SQLite
database) and prints, from its report.json: Kendall tau and RBO between the study's ordering of
the systems and the human qrels' (both by nDCG@10), label agreement (kappa), each system's
nDCG@10 under both label sets, and the study's cost (judge calls, input tokens, critical path)
and wall time. The oracle reads each passage's human grade from its metadata ("score"; a
passage the qrels do not judge counts as 0): what a perfect judge with noise would answer, or
with `profile` what the benchmark's simulated judge of that name would (README: `oracle`).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from tierank.evaluation import read_qrels

DATA = Path(__file__).resolve().parent.parent.parent / "shared" / "data" / "trec-dl"
RUNS = {
    "bm25": "run.rankllm.BM25.dl19.top100.trec",
    "bm25_rm3": "run.rankllm.BM25_RM3.dl19.top100.trec",
    "tasb": "run.rankllm.D_BERT_KD_TASB.dl19.top100.trec",
    "ada2": "run.rankllm.OPEN_AI_ADA2.dl19.top100.trec",
    "splade_pp": "run.rankllm.SPLADE_P_P_ENSEMBLE_DISTIL.dl19.top100.trec",
    "repllama": "run.rankllm.REP_LLAMA.dl19.top1000.trec",
}


def graded_passages(target: Path) -> None:
    """The union passages with each one's human grade (0 where unjudged) as metadata."""
    qrels = read_qrels(DATA / "qrels.dl19-passage.txt")
    best = {
        doc: max(q[doc] for q in qrels.values() if doc in q) for q in qrels.values() for doc in q
    }
    source = DATA / "passages" / "dl19-rankllm-union-passages.jsonl"
    with source.open() as lines, target.open("w") as out:
        for line in lines:
            record = json.loads(line)
            record["metadata"] = {"score": str(best.get(record["docid"], 0))}
            out.write(json.dumps(record) + "\n")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--depth", type=int, default=20)
    parser.add_argument(
        "--judge",
        default="oracle?noise=1.0",
        help="judge spec (study run --judge); the oracle reads the human grade as its score",
    )
    parser.add_argument("--top-k", type=int, default=10)
    parser.add_argument("--k", type=int, default=10)
    parser.add_argument("--max-live", type=int, default=16)
    parser.add_argument("--bands", default="", help="label rank bands (study run --bands)")
    parser.add_argument("--seed", type=int, default=0, help="the study's seed (study run --seed)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        root = Path(scratch)
        passages = root / "passages.jsonl"
        graded_passages(passages)
        command = [
            sys.executable, "-m", "tierank.client", "study", "run",
            "--topics", str(DATA / "topics.dl19-passage.txt"), "--passages", str(passages),
            *(f for name, run in RUNS.items() for f in ("--run", f"{name}={DATA / 'runs' / run}")),
            "--depth", str(args.depth), "--top-k", str(args.top_k), "--k", str(args.k),
            "--judge", args.judge, "--max-live", str(args.max_live),
            "--human-qrels", str(DATA / "qrels.dl19-passage.txt"),
            "--db", str(root / "study.db"), "--output-dir", str(root / "out"), "--json",
            "--seed", str(args.seed),
        ]  # fmt: skip
        if args.bands:
            command += ["--bands", args.bands]
        started = time.monotonic()
        result = subprocess.run(command, capture_output=True, text=True, check=False)
        wall = time.monotonic() - started
        if result.returncode not in (0, 4):
            print(result.stderr, file=sys.stderr)
            return 1
        report = json.loads(result.stdout)
    agreement = report["agreement"]
    human = agreement["human_measures"]
    print(
        f"DL19, {len(RUNS)} systems, depth {args.depth}, judge {args.judge},"
        f" top-k {args.top_k}, k {args.k}, seed {args.seed}; labels: {report['labels']}"
    )
    print(f"{'system':<12} {'study nDCG@10':>24} {'human nDCG@10':>14}")
    for system in report["systems"]:
        ndcg = system["measures"]["nDCG@10"]
        print(
            f"{system['name']:<12} {ndcg['mean']:.4f} [{ndcg['low']:.4f}, {ndcg['high']:.4f}]"
            f" {human[system['name']]['nDCG@10']:>14.4f}"
        )
    print(f"study ranking: {' > '.join(report['ranking'])}")
    print(f"human ranking: {' > '.join(agreement['human_ranking'])}")
    print(
        f"Kendall tau {agreement['kendall_tau']:.3f}, RBO {agreement['rbo']:.3f},"
        f" kappa {agreement['kappa']:.3f}, weighted kappa {agreement['weighted_kappa']:.3f}"
        f" over {agreement['pairs']} pairs"
    )
    cost = report["cost"]
    queries = report["queries"]
    unsettled = Counter(q["reason"] for q in report["per_query"] if not q["settled"])
    print(
        f"cost: {cost['calls']} judge calls, {cost['input_tokens']:,} input tokens, critical"
        f" path {cost['critical_path']}; {queries['settled']}/{queries['total']} queries settled"
        + "".join(f", {count} {reason}" for reason, count in sorted(unsettled.items()))
        + f"; study wall {cost['wall_seconds']:.1f} s, command wall {wall:.1f} s"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
