"""Do a study's labels mean what human qrels would say? DL19 (43 queries, the six systems'
runs at depth 20), ranked by the strong simulated listwise judge (`oracle?profile=strong`),
graded by the pointwise oracle at noise 1.0 (GPT-4o with the UMBRELA prompt: kappa ~0.4 against
NIST), each passage's hidden score its NIST grade (0 where NIST did not judge it).

    python -m tierank.bench.study_labels                    # 3 study seeds, 200 samples each size
    python -m tierank.bench.study_labels --seeds 1 --draws 50 --sizes 10   # a quick look
    python -m tierank.bench.study_labels --grader 'oracle?noise=1.0&bias=0.7'   # a biased grader

For each study seed, `tierank study run` runs as a user runs it (a process, an embedded server
on a fresh SQLite database) twice: with pointwise labels (the default, `--anchor-judge` the
grader) and with rank bands. The same grader then grades every pooled document once through
the server's GradePairs (what UMBRELA does: one grade per document, the same seed per pair as
the study's probes). Each labelling is set against the NIST qrels: Cohen's kappa over the
pooled documents NIST judged, the mean |nDCG@10 - human nDCG@10| over the systems, Kendall's
tau of the systems' order, whether P@10 and RR(rel=2)@10 separate the systems the human
labels separate, and the pointwise calls and tokens.

Human samples: for each size, `--draws` random sets of that many queries take their NIST
qrels as a person's sample; the study is calibrated with each exactly as the server's report
does (server.studies.labels and the report's tally, in this process, on the orders and probes
the study stored) and its prediction-powered intervals are checked against the human value
(nDCG@10 under the NIST qrels over all 43 queries): coverage of the systems' means and of
their paired differences, mean half-widths, and kappa of the other queries' labels. The first
draw of each size is also applied with `tierank study calibrate` on the study itself, and its
figures compared with the in-process ones (they must agree).
"""

from __future__ import annotations

import argparse
import json
import math
import random
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from itertools import combinations
from pathlib import Path
from typing import Any

import grpc

from tierank.bench.study_dl19 import DATA, RUNS, graded_passages
from tierank.client import Client, LocalServer
from tierank.client._inputs import read_passages
from tierank.client._spec import parse_judge
from tierank.evaluation import (
    Qrels,
    Run,
    StudyTally,
    cohen_kappa,
    evaluate,
    kendall_tau_b,
    parse_measure,
    read_qrels,
    read_run,
)
from tierank.evaluation.grade_model import GradeModel, fit_grade_model
from tierank.server.studies.labels import (
    Labeller,
    ProbeReadings,
    QueryOrder,
    Sample,
    fit_models,
)
from tierank.v1 import eval_pb2, eval_pb2_grpc, rank_pb2, study_pb2

NDCG = "nDCG@10"
LISTWISE = "oracle?profile=strong"
GRADER = "oracle?noise=1.0"
GRADES = [0, 1, 2, 3]


@dataclass
class Labelling:
    """One way of labelling the study, scored against NIST."""

    name: str
    kappa: float
    mean_abs_error: float
    tau: float
    separates: str
    calls_per_document: float
    input_tokens: int
    listwise_calls: int = 0


@dataclass
class SampleFigures:
    size: int
    draws: int = 0
    covered_means: list[bool] = field(default_factory=list)
    half_widths: list[float] = field(default_factory=list)
    covered_differences: list[bool] = field(default_factory=list)
    difference_half_widths: list[float] = field(default_factory=list)
    kappas: list[float] = field(default_factory=list)
    mean_abs_errors: list[float] = field(default_factory=list)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--seeds", type=int, default=10, help="study seeds for the labels' figures (default 10)"
    )
    parser.add_argument(
        "--sample-seeds",
        type=int,
        default=3,
        help="of those, the first this many also simulate human samples (default 3)",
    )
    parser.add_argument(
        "--draws", type=int, default=200, help="samples per size and seed (default 200)"
    )
    parser.add_argument("--sizes", default="5,10,20", help="sample sizes (default 5,10,20)")
    parser.add_argument("--depth", type=int, default=20)
    parser.add_argument(
        "--top-k", type=int, default=0, help="study run --top-k (default 0: the whole order)"
    )
    parser.add_argument("--judge", default=LISTWISE, help=f"listwise judge (default {LISTWISE})")
    parser.add_argument("--grader", default=GRADER, help=f"pointwise grader (default {GRADER})")
    parser.add_argument(
        "--sheet",
        action="store_true",
        help="a human sample is a filled-in labelling sheet (the NIST grades of the pools'"
        " documents), and the human value that of the pools so graded; default: the NIST"
        " qrels of the sampled queries, and the human value NIST's",
    )
    parser.add_argument("--json", type=Path, help="also write every figure here")
    args = parser.parse_args()
    sizes = [int(size) for size in args.sizes.split(",")]
    qrels = read_qrels(DATA / "qrels.dl19-passage.txt")
    runs = {name: read_run(DATA / "runs" / file) for name, file in RUNS.items()}
    results: dict[str, Any] = {"labellings": [], "samples": []}
    labellings: dict[str, list[Labelling]] = {}
    samples = {size: SampleFigures(size) for size in sizes}
    started = time.monotonic()
    with tempfile.TemporaryDirectory() as scratch:
        root = Path(scratch)
        passages = root / "passages.jsonl"
        graded_passages(passages)
        for seed in range(args.seeds):
            for labelling in _one_study(root, passages, seed, args, qrels, runs, samples):
                labellings.setdefault(labelling.name, []).append(labelling)
                results["labellings"].append({"seed": seed, **labelling.__dict__})
    _print(args, labellings, samples, time.monotonic() - started)
    if args.json:
        results["samples"] = [figures.__dict__ for figures in samples.values()]
        args.json.write_text(json.dumps(results, indent=2) + "\n")
    return 0


def _one_study(
    root: Path,
    passages: Path,
    seed: int,
    args: argparse.Namespace,
    qrels: Qrels,
    runs: dict[str, Run],
    samples: dict[int, SampleFigures],
) -> list[Labelling]:
    found = []
    pointwise_db = root / f"pointwise-{seed}.db"
    report = _study_run(root, passages, pointwise_db, seed, args, "--anchor-judge", args.grader)
    bands_db = root / f"bands-{seed}.db"
    bands = _study_run(root, passages, bands_db, seed, args, "--mapping", "bands")
    pooled = report["queries"]["total"] and sum(q["pool_size"] for q in report["per_query"])
    with LocalServer(db=pointwise_db) as server, Client(server.address) as client:
        name = report["study"]
        orders, query_texts = _orders(client, name)
        own = _labels(client, name)
        pointwise = _scored(
            "pointwise (default)",
            own,
            qrels,
            runs,
            report["cost"]["pointwise_calls"] / pooled,
            report["cost"]["pointwise_input_tokens"],
        )
        pointwise.listwise_calls = report["cost"]["calls"] - report["cost"]["pointwise_calls"]
        found.append(pointwise)
        every, tokens = _every_document(
            server.address, orders, query_texts, passages, args.grader, seed
        )
        found.append(_scored("every document graded once", every, qrels, runs, 1.0, tokens))
        base = fit_grade_model(_readings(orders, Sample()).probed, seed=seed)
        first = random.Random(f"{seed}/check").sample(sorted(orders), min(samples))
        _check_calibrate(root, server.address, name, first, qrels, orders, runs, seed, base)
        for size in sorted(samples) if seed < args.sample_seeds else ():
            _samples(samples[size], orders, qrels, runs, seed, args.draws, base, args.sheet)
            print(f"seed {seed}: {samples[size].draws} samples of {size}", file=sys.stderr)
    with LocalServer(db=bands_db) as server, Client(server.address) as client:
        found.append(_scored("rank bands", _labels(client, bands["study"]), qrels, runs, 0.0, 0))
    return found


def _study_run(
    root: Path,
    passages: Path,
    db: Path,
    seed: int,
    args: argparse.Namespace,
    *labels: str,
) -> dict[str, Any]:
    command = [
        sys.executable, "-m", "tierank.client", "study", "run",
        "--topics", str(DATA / "topics.dl19-passage.txt"), "--passages", str(passages),
        *(f for name, run in RUNS.items() for f in ("--run", f"{name}={DATA / 'runs' / run}")),
        "--depth", str(args.depth), "--top-k", str(args.top_k), "--judge", args.judge,
        "--seed", str(seed),
        "--db", str(db), "--output-dir", str(root / db.stem), "--json", *labels,
    ]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode not in (0, 4):
        raise SystemExit(f"study run failed ({done.returncode}):\n{done.stderr}")
    report: dict[str, Any] = json.loads(done.stdout)
    return report


def _orders(client: Client, name: str) -> tuple[dict[str, QueryOrder], dict[str, str]]:
    """Each judged query's final tiers and probes, as the study stored them."""
    orders, texts = {}, {}
    for query in client.list_study_queries(name):
        if not query.job:
            continue
        job = client.get_job(query.job, full=True)
        tiers = [list(tier.candidate_ids) for tier in job.tiers]
        orders[query.query_id] = QueryOrder(
            query.query_id, tiers, {p.doc_id: p.grade for p in query.probes}
        )
        texts[query.query_id] = job.spec.query
    return orders, texts


def _labels(client: Client, name: str) -> Qrels:
    qrels: Qrels = {}
    for line in client.export_study_qrels(name).splitlines():
        qid, _, doc, grade = line.split()
        qrels.setdefault(qid, {})[doc] = int(grade)
    return qrels


def _every_document(
    address: str,
    orders: dict[str, QueryOrder],
    texts: dict[str, str],
    passages_file: Path,
    grader: str,
    seed: int,
) -> tuple[Qrels, int]:
    """Every pooled document graded once by the grader (GradePairs, the study's seed, so a
    document the study probed gets the same grade)."""
    wanted = {doc for order in orders.values() for doc in order.documents}
    passages = read_passages(passages_file, wanted)
    request = eval_pb2.GradePairsRequest(judge=parse_judge(grader), seed=seed, max_in_flight=16)
    for qid, order in orders.items():
        for doc in order.documents:
            passage = passages[doc]
            request.pairs.add(
                query_id=qid,
                query=texts[qid],
                passage=rank_pb2.Candidate(id=doc, text=passage.text, metadata=passage.metadata),
            )
    options = [
        ("grpc.max_send_message_length", 64 << 20),
        ("grpc.max_receive_message_length", 64 << 20),
    ]
    with grpc.insecure_channel(address, options=options) as channel:
        answer = eval_pb2_grpc.EvalServiceStub(channel).GradePairs(request, timeout=600)
    labels: Qrels = {}
    for graded in answer.grades:
        if graded.HasField("grade"):
            labels.setdefault(graded.query_id, {})[graded.doc_id] = graded.grade
    return labels, answer.stats.usage.input_tokens


def _ndcg(
    labels: Qrels, runs: dict[str, Run], measure: str = NDCG
) -> dict[str, dict[str, float | None]]:
    parsed = parse_measure(measure)
    return {
        system: evaluate(
            [parsed], labels, {q: run.get(q, {}) for q in labels}, all_queries=True
        ).per_query[parsed]
        for system, run in runs.items()
    }


def _mean(values: dict[str, float | None]) -> float:
    present = [v for v in values.values() if v is not None]
    return sum(present) / len(present)


def _scored(
    name: str, labels: Qrels, qrels: Qrels, runs: dict[str, Run], per_doc: float, tokens: int
) -> Labelling:
    ours = [g for q, docs in labels.items() for d, g in docs.items() if d in qrels.get(q, {})]
    theirs = [qrels[q][d] for q, docs in labels.items() for d in docs if d in qrels.get(q, {})]
    kappa = cohen_kappa(ours, theirs, categories=GRADES) or 0.0
    human = {q: qrels[q] for q in labels}
    study_means = {s: _mean(v) for s, v in _ndcg(labels, runs).items()}
    human_means = {s: _mean(v) for s, v in _ndcg(human, runs).items()}
    systems = sorted(runs)
    tau = kendall_tau_b([study_means[s] for s in systems], [human_means[s] for s in systems])
    error = statistics.mean(abs(study_means[s] - human_means[s]) for s in systems)
    separated = []
    for measure in ("P@10", "RR(rel=2)@10"):
        ours_by = {s: _mean(v) for s, v in _ndcg(labels, runs, measure).items()}
        theirs_by = {s: _mean(v) for s, v in _ndcg(human, runs, measure).items()}
        pairs = [(a, b) for a, b in combinations(systems, 2) if theirs_by[a] != theirs_by[b]]
        kept = sum(ours_by[a] != ours_by[b] for a, b in pairs)
        separated.append(f"{measure} {kept}/{len(pairs)}")
    return Labelling(name, kappa, error, tau or 0.0, ", ".join(separated), per_doc, tokens)


def _samples(
    figures: SampleFigures,
    orders: dict[str, QueryOrder],
    qrels: Qrels,
    runs: dict[str, Run],
    seed: int,
    draws: int,
    base: GradeModel,
    sheet: bool,
) -> None:
    """`draws` human samples of `figures.size` queries, each applied as the report does. A
    sample is the NIST qrels of its queries; with `sheet`, what a labelling sheet of `study
    sample` gives: the NIST grade of each pooled document (0 where NIST has none), and the
    human value is then that of the pools' documents so graded."""
    queries = sorted(orders)
    human = {q: qrels[q] for q in queries}
    if sheet:
        human = {q: {d: qrels[q].get(d, 0) for d in orders[q].documents} for q in queries}
    human_values = _ndcg(human, runs)
    truth = {system: _mean(values) for system, values in human_values.items()}
    rng = random.Random(f"{seed}/{figures.size}")
    for _ in range(draws):
        chosen = rng.sample(queries, figures.size)
        results, labels = calibrated(orders, {q: human[q] for q in chosen}, runs, seed, base)
        figures.draws += 1
        for system in results.systems:
            interval = system.measures[NDCG]
            assert interval.low is not None and interval.high is not None
            figures.covered_means.append(interval.low <= truth[system.name] <= interval.high)
            figures.half_widths.append((interval.high - interval.low) / 2)
        for pair in results.pairs:
            test = pair.test
            assert test.low is not None and test.high is not None
            difference = truth[pair.better] - truth[pair.worse]
            figures.covered_differences.append(test.low <= difference <= test.high)
            figures.difference_half_widths.append((test.high - test.low) / 2)
        rest = {q: labels[q] for q in queries if q not in chosen}
        scored = _scored("sample", rest, qrels, runs, 0.0, 0)
        figures.kappas.append(scored.kappa)
        figures.mean_abs_errors.append(
            statistics.mean(
                abs((system.measures[NDCG].mean or 0.0) - truth[system.name])
                for system in results.systems
            )
        )


def _readings(orders: dict[str, QueryOrder], sample: Sample) -> ProbeReadings:
    readings = ProbeReadings()
    readings.add([orders[q] for q in sorted(orders)], sample)
    return readings


def calibrated(
    orders: dict[str, QueryOrder],
    sample_grades: Qrels,
    runs: dict[str, Run],
    seed: int,
    base: GradeModel,
) -> tuple[Any, Qrels]:
    """The study's results with this human sample, computed as the server's report computes
    them (its labeller and tally; `base`, the model of the probes alone, which the server fits
    with them), and the study's own labels of every query."""
    sample = Sample({q: dict(g) for q, g in sample_grades.items()})
    ordered = [orders[q] for q in sorted(orders)]
    model, folds = fit_models(_readings(orders, sample), sample, seed, base)
    labeller = Labeller(_pointwise_spec(seed), sample, model, folds, predictor=base)
    tally = StudyTally([NDCG], systems=sorted(runs), primary=NDCG)
    own: Qrels = {}
    for query in labeller.label(ordered, predictions=True):
        qid = query.query_id
        own[qid] = query.own
        tally.add(
            qid,
            query.own,
            {system: run.get(qid, {}) for system, run in runs.items()},
            sample=query.reported if query.sample is not None else None,
            sample_grades=query.sample,
            predictions=query.predictions,
        )
    return tally.results(), own


def _pointwise_spec(seed: int) -> study_pb2.StudySpec:
    spec = study_pb2.StudySpec()
    spec.labels.pointwise.judge.CopyFrom(parse_judge(GRADER))
    spec.labels.pointwise.seed = seed
    return spec


def _check_calibrate(
    root: Path,
    address: str,
    name: str,
    chosen: list[str],
    qrels: Qrels,
    orders: dict[str, QueryOrder],
    runs: dict[str, Run],
    seed: int,
    base: GradeModel,
) -> None:
    """`tierank study calibrate` with one sample gives the figures computed in this process."""
    sample = root / f"sample-{seed}.qrels"
    sample.write_text(
        "".join(f"{q} 0 {d} {g}\n" for q in chosen for d, g in sorted(qrels[q].items()))
    )
    command = [
        sys.executable, "-m", "tierank.client", "study", "calibrate", name,
        "--human-sample", str(sample), "--server", address, "--json",
        "--output-dir", str(root / f"calibrated-{seed}"),
    ]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode not in (0, 4):
        raise SystemExit(f"study calibrate failed ({done.returncode}):\n{done.stderr}")
    product = json.loads(done.stdout)
    results, _ = calibrated(orders, {q: qrels[q] for q in chosen}, runs, seed, base)
    for system in results.systems:
        ours = system.measures[NDCG]
        theirs = next(s for s in product["systems"] if s["name"] == system.name)
        shown = theirs["measures"][NDCG]
        if not math.isclose(ours.mean or 0.0, shown["mean"], abs_tol=1e-9):
            raise SystemExit(f"calibrate disagrees on {system.name}: {ours} vs {shown}")


def _print(
    args: argparse.Namespace,
    labellings: dict[str, list[Labelling]],
    samples: dict[int, SampleFigures],
    wall: float,
) -> None:
    print(
        f"DL19, {len(RUNS)} systems, depth {args.depth}, top-k {args.top_k}, listwise"
        f" {args.judge}, grader"
        f" {args.grader}, {args.seeds} study seeds, human samples on the first"
        f" {min(args.seeds, args.sample_seeds)} ({wall:.0f} s)"
    )
    print(
        f"{'labels':<28} {'kappa':>14} {'|nDCG-human|':>14} {'tau':>12} {'probes/doc':>10}"
        f" {'tokens':>8}  separates"
    )
    for name, found in labellings.items():
        print(
            f"{name:<28} {_spread([f.kappa for f in found]):>14}"
            f" {_spread([f.mean_abs_error for f in found]):>14}"
            f" {_spread([f.tau for f in found]):>12}"
            f" {statistics.mean(f.calls_per_document for f in found):>10.3f}"
            f" {statistics.mean(f.input_tokens for f in found):>8,.0f}  {found[0].separates}"
        )
    listwise = [f.listwise_calls for f in labellings.get("pointwise (default)", [])]
    if listwise:
        print(f"the tournaments' own calls: {statistics.mean(listwise):,.0f} a study (mean)")
    print(
        f"{'human sample':<14} {'draws':>6} {'cover means':>12} {'half-width':>11}"
        f" {'cover diffs':>12} {'diff half':>10} {'kappa rest':>11} {'|nDCG-human|':>13}"
    )
    for figures in samples.values():
        print(
            f"{figures.size:>4} queries   {figures.draws:>6}"
            f" {statistics.mean(figures.covered_means):>12.3f}"
            f" {statistics.mean(figures.half_widths):>11.4f}"
            f" {statistics.mean(figures.covered_differences):>12.3f}"
            f" {statistics.mean(figures.difference_half_widths):>10.4f}"
            f" {statistics.mean(figures.kappas):>11.3f}"
            f" {statistics.mean(figures.mean_abs_errors):>13.4f}"
        )


def _spread(values: list[float]) -> str:
    if len(values) < 2:
        return f"{values[0]:.3f}"
    return f"{statistics.mean(values):.3f}±{statistics.stdev(values):.3f}"


if __name__ == "__main__":
    sys.exit(main())
