"""Qualifying judges on DL19: does `tierank qualify` measure what a judge really is?

The `oracle` judge's hidden score is the NIST grade (the passage file is rewritten with each
judged passage's grade in its metadata, for the oracle only), perceived with Gaussian noise σ
on every call: its true pair accuracy for a grade gap Δ is Φ(Δ / (σ√2)), so the measured
accuracy can be checked against the truth. The `lexical` judge (BM25 over the batch) is a real,
weak judge: nothing tells it the grades. Candidates come from the judged documents of the BM25
run's top 100, through a real server (in this process, on loopback, SQLite in a temporary
folder).

    .venv/bin/python -m tierank.bench.qualify_bench [--noise 0.5 2.0] [--queries 30]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import tempfile
from pathlib import Path
from statistics import NormalDist

import grpc

from tierank.evaluation import read_qrels
from tierank.server import logs
from tierank.server.app import background_server
from tierank.server.settings import ServerSettings
from tierank.v1 import eval_pb2, eval_pb2_grpc, rank_pb2

DATA = Path(__file__).resolve().parent.parent.parent / "shared" / "data" / "trec-dl"
QRELS = DATA / "qrels.dl19-passage.txt"
TOPICS = DATA / "topics.dl19-passage.txt"
PASSAGES = DATA / "passages" / "dl19-rankllm-union-passages.jsonl"
RUN = DATA / "runs" / "run.rankllm.BM25.dl19.top100.trec"


def graded_passages(path: Path) -> Path:
    """The passages with each judged one's grade as metadata "score" (the oracle's truth)."""
    grades: dict[str, int] = {}
    for judged in read_qrels(QRELS).values():
        for doc, grade in judged.items():
            grades.setdefault(doc, grade)
    with PASSAGES.open() as source, path.open("w") as out:
        for line in source:
            record = json.loads(line)
            record["metadata"] = {"score": str(grades.get(record["docid"], 0))}
            out.write(json.dumps(record) + "\n")
    return path


def text(path: Path) -> eval_pb2.TextFile:
    return eval_pb2.TextFile(name=path.name, content=path.read_text())


async def qualify(
    stub: eval_pb2_grpc.EvalServiceAsyncStub,
    judge: rank_pb2.JudgeSpec,
    passages: Path,
    queries: int,
) -> eval_pb2.Qualification:
    return await stub.QualifyJudge(
        eval_pb2.QualifyJudgeRequest(
            judge=judge,
            qrels=text(QRELS),
            topics=text(TOPICS),
            passages=text(passages),
            run=text(RUN),
            max_queries=queries,
            shuffles=2,
            batches_per_query=2,
            pointwise=judge.provider == "oracle",
        ),
        timeout=600,
    )


def report(label: str, result: eval_pb2.Qualification, sigma: float | None) -> None:
    listwise = result.listwise
    accuracy = listwise.pair_accuracy
    print(f"\n{label}: {result.query_count} queries, {result.cost.calls} calls")
    print(
        f"  pair accuracy {accuracy.value:.3f} [{accuracy.low:.3f}, {accuracy.high:.3f}]"
        f" of {accuracy.total} pairs"
    )
    for gap in listwise.by_gap:
        line = (
            f"    gap {gap.gap}: {gap.accuracy.value:.3f} "
            f"[{gap.accuracy.low:.3f}, {gap.accuracy.high:.3f}] n={gap.accuracy.total}"
        )
        if sigma is not None:
            truth = NormalDist().cdf(gap.gap / (sigma * math.sqrt(2)))
            inside = gap.accuracy.low <= truth <= gap.accuracy.high
            line += f"   analytic {truth:.3f} ({'inside' if inside else 'OUTSIDE'} the interval)"
        print(line)
    first = listwise.first_position[0].ranked_first if listwise.first_position else None
    if first is not None:
        print(
            f"  position 1 ranked first {first.value:.3f} [{first.low:.3f}, {first.high:.3f}]"
            f" (chance {listwise.first_position[0].chance:.3f})"
        )
    print(
        f"  self-consistency {listwise.self_consistency.value:.3f}, cyclic triples "
        f"{listwise.cyclic_triples.value:.3f}"
    )
    if result.HasField("pointwise"):
        pw = result.pointwise
        kappa = pw.quadratic_weighted_kappa if pw.HasField("quadratic_weighted_kappa") else None
        print(
            f"  pointwise: quadratic weighted kappa {kappa:.3f}"
            if kappa is not None
            else "  pointwise: kappa undefined"
        )
    print(f"  {result.verdict}")


async def main(noises: list[float], queries: int) -> None:
    logs.configure("warning", "console")
    with tempfile.TemporaryDirectory() as workdir:
        passages = graded_passages(Path(workdir) / "graded.jsonl")
        settings = ServerSettings(listen="127.0.0.1:0", db=Path(workdir) / "q.db")
        async with (
            background_server(settings) as address,
            grpc.aio.insecure_channel(
                address, options=[("grpc.max_send_message_length", 64 << 20)]
            ) as channel,
        ):
            stub = eval_pb2_grpc.EvalServiceStub(channel)
            for sigma in noises:
                judge = rank_pb2.JudgeSpec(
                    provider="oracle",
                    parameters=rank_pb2.JudgeParameters(options={"noise": str(sigma)}),
                )
                report(
                    f"oracle, noise {sigma}",
                    await qualify(stub, judge, passages, queries),
                    sigma,
                )
            lexical = rank_pb2.JudgeSpec(provider="lexical")
            report(
                "lexical (BM25 over the batch)",
                await qualify(stub, lexical, PASSAGES, queries),
                None,
            )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--noise", type=float, nargs="+", default=[0.5, 2.0])
    parser.add_argument("--queries", type=int, default=30)
    arguments = parser.parse_args()
    asyncio.run(main(arguments.noise, arguments.queries))
