"""Pipeline study: do tier-derived labels order retrieval systems as human labels do?

For DL19, the pool of each query is the union of the five rank_llm runs' top 20. A real
tierank server (in this process, on loopback, SQLite in a temporary folder) ranks each pool
with the offline `oracle` judge, whose hidden score is the NIST grade (unjudged = 0) plus fresh
Gaussian noise on every call. The tiers become labels through the EvalService (rank bands, and
pointwise anchoring with the oracle grader at the same noise), the five runs are scored by
nDCG@10 under those labels and under the human qrels (on the same queries), and the two system
orderings are compared with Kendall's tau-b and RBO (p = 0.9, extrapolated).

    .venv/bin/python -m tierank.bench.eval_pipeline [--noise 0.5 2.0] [--queries 43]
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import anyio
import grpc

from tierank.evaluation import Qrels, Run, read_candidates, read_qrels, read_run
from tierank.evaluation.ordering import rank_documents
from tierank.server import logs
from tierank.server.app import background_server
from tierank.server.settings import ServerSettings
from tierank.v1 import eval_pb2, eval_pb2_grpc, rank_pb2, rank_pb2_grpc

DATA = Path(__file__).resolve().parent.parent.parent / "shared" / "data" / "trec-dl"
RUNS = sorted((DATA / "runs").glob("*.trec"))
POOL_DEPTH = 20
BATCH_SIZE = 10
JOBS_IN_FLIGHT = 8
RUBRIC = "A passage is relevant when it answers the question the query asks."


@dataclass(frozen=True)
class Row:
    noise: float
    mapping: str
    queries: int
    judge_calls: int
    pointwise_calls: int
    kappa: float | None
    kendall_tau_b: float | None
    rbo: float
    seconds: float
    scores: list[tuple[str, float | None, float | None]]


def pools(runs: dict[str, Run], qids: Sequence[str]) -> dict[str, list[str]]:
    """Union of every run's top POOL_DEPTH per query, in first-seen order."""
    return {
        qid: list(
            dict.fromkeys(
                doc
                for run in runs.values()
                for doc in rank_documents(run.get(qid, {}))[:POOL_DEPTH]
            )
        )
        for qid in qids
    }


def job_spec(
    query: str, pool: list[str], texts: dict[str, str], grades: dict[str, int], noise: float
) -> rank_pb2.JobSpec:
    return rank_pb2.JobSpec(
        query=query,
        rubric=RUBRIC,
        candidates=[
            rank_pb2.Candidate(
                id=doc,
                text=texts[doc],
                metadata={"score": str(grades.get(doc, 0)), "grade": str(grades.get(doc, 0))},
            )
            for doc in pool
        ],
        judges=[oracle(noise)],
        batch_size=BATCH_SIZE,
        seed=7,
    )


def oracle(noise: float, **options: str) -> rank_pb2.JudgeSpec:
    return rank_pb2.JudgeSpec(
        provider="oracle",
        model="nist-grade",
        parameters=rank_pb2.JudgeParameters(options={"noise": str(noise), **options}),
    )


async def rank_all(
    stub: rank_pb2_grpc.RankServiceAsyncStub, specs: dict[str, rank_pb2.JobSpec]
) -> dict[str, rank_pb2.Job]:
    jobs: dict[str, rank_pb2.Job] = {}
    slots = anyio.Semaphore(JOBS_IN_FLIGHT)

    async def rank(qid: str) -> None:
        async with slots:
            name = ""
            async for event in stub.Rank(rank_pb2.RankRequest(spec=specs[qid])):
                name = event.job
            jobs[qid] = await stub.GetJob(rank_pb2.GetJobRequest(name=name))

    async with anyio.create_task_group() as group:
        for qid in specs:
            group.start_soon(rank, qid)
    return jobs


async def study(address: str, qids: list[str], noise_levels: Sequence[float]) -> list[Row]:
    qrels: Qrels = read_qrels(DATA / "qrels.dl19-passage.txt")
    topics = dict(
        line.split("\t", 1)
        for line in (DATA / "topics.dl19-passage.txt").read_text().splitlines()
        if line.strip()
    )
    runs = {path.name: read_run(path) for path in RUNS}
    pooled = pools(runs, qids)
    wanted = {doc for pool in pooled.values() for doc in pool}
    passages = DATA / "passages" / "dl19-rankllm-union-passages.jsonl"
    texts = {c.id: c.text for c in read_candidates(passages) if c.id in wanted}
    human = eval_pb2.LabelSource(
        qrels=eval_pb2.TextFile(
            name="qrels.dl19-passage.txt",
            content=(DATA / "qrels.dl19-passage.txt").read_text(),
        )
    )
    run_files = [eval_pb2.TextFile(name=p.name, content=p.read_text()) for p in RUNS]
    rows: list[Row] = []
    async with grpc.aio.insecure_channel(address) as channel:
        ranks = rank_pb2_grpc.RankServiceStub(channel)
        evals = eval_pb2_grpc.EvalServiceStub(channel)
        for noise in noise_levels:
            started = time.perf_counter()
            specs = {
                q: job_spec(topics[q].strip(), pooled[q], texts, qrels.get(q, {}), noise)
                for q in qids
            }
            jobs = await rank_all(ranks, specs)
            ranked_s = time.perf_counter() - started
            calls = sum(job.stats.judge_calls for job in jobs.values())
            entries = [eval_pb2.JobTiers(job=jobs[q].name, query_id=q) for q in qids]
            mappings = {
                "rank bands 10:3,30:2,100:1": eval_pb2.TierMapping(rank_bands=eval_pb2.RankBands()),
                "pointwise anchoring": eval_pb2.TierMapping(
                    pointwise=eval_pb2.PointwiseAnchoring(
                        judge=oracle(noise, score_key="grade"), seed=11
                    )
                ),
            }
            for mapping_name, mapping in mappings.items():
                labeled_at = time.perf_counter()
                response = await evals.CompareLabels(
                    eval_pb2.CompareLabelsRequest(
                        a=human,
                        b=eval_pb2.LabelSource(
                            tiers=eval_pb2.TierLabels(jobs=entries, mapping=mapping)
                        ),
                        runs=run_files,
                        measure="nDCG@10",
                    )
                )
                systems = response.systems
                rows.append(
                    Row(
                        noise=noise,
                        mapping=mapping_name,
                        queries=systems.query_count,
                        judge_calls=calls,
                        pointwise_calls=sum(r.judge_calls for r in response.labeling),
                        kappa=_optional(response, "quadratic_weighted_kappa"),
                        kendall_tau_b=_optional(systems, "kendall_tau_b"),
                        rbo=systems.rbo_extrapolated,
                        seconds=ranked_s + time.perf_counter() - labeled_at,
                        scores=[
                            (s.run, _optional(s, "score_a"), _optional(s, "score_b"))
                            for s in systems.systems
                        ],
                    )
                )
    return rows


def _optional(message: object, field: str) -> float | None:
    return getattr(message, field) if message.HasField(field) else None  # type: ignore[attr-defined]


def _number(value: float | None) -> str:
    return "NA" if value is None else f"{value:.3f}"


def report(rows: list[Row]) -> str:
    lines = [
        "| noise (σ, grades) | tiers → labels | queries | listwise calls | pointwise calls "
        "| quadratic κ vs NIST | Kendall τ-b | RBO (p=0.9, ext.) | seconds |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r.noise:g} | {r.mapping} | {r.queries} | {r.judge_calls} | {r.pointwise_calls} "
            f"| {_number(r.kappa)} | {_number(r.kendall_tau_b)} | {r.rbo:.3f} | {r.seconds:.1f} |"
        )
    lines += ["", "nDCG@10 per system (NIST qrels / tier labels):", ""]
    lines.append("| run | NIST | " + " | ".join(f"σ={r.noise:g}, {r.mapping}" for r in rows) + " |")
    lines.append("|---" * (len(rows) + 2) + "|")
    for i, (run, human, _) in enumerate(rows[0].scores):
        cells = " | ".join(_number(r.scores[i][2]) for r in rows)
        lines.append(f"| {run} | {_number(human)} | {cells} |")
    return "\n".join(lines)


async def main_async(args: argparse.Namespace) -> list[Row]:
    qrels = read_qrels(DATA / "qrels.dl19-passage.txt")
    qids = sorted(qrels)[: args.queries]
    with tempfile.TemporaryDirectory(prefix="tierank-eval-pipeline-") as tmp:
        settings = ServerSettings(
            listen="127.0.0.1:0", db=Path(tmp) / "tierank.db", log_level="error"
        )
        async with background_server(settings) as address:
            return await study(address, qids, args.noise)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--noise", type=float, nargs="+", default=[0.5, 2.0], help="oracle noise levels (σ)"
    )
    parser.add_argument(
        "--queries", type=int, default=43, help="first N DL19 queries by id (default all 43)"
    )
    args = parser.parse_args(argv)
    logs.configure("warning", "json")
    started = time.perf_counter()
    rows = asyncio.run(main_async(args))
    print(report(rows))
    print(f"\ntotal {time.perf_counter() - started:.1f}s")


if __name__ == "__main__":
    main()
