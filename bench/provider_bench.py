"""LLM judges through the whole service: one judge, and a 3-provider ensemble (adaptive, all).

    .venv/bin/python -m tierank.bench.provider_bench [--n 100] [--k 10] [--top-k 10]
        [--latency 1.0] [--jitter 0.3] [--noise 15] [--max-in-flight 30] [--seed 0]

A real server (in this process, a fresh SQLite file per run so no run is served from another's
verdict cache) drives the real OpenAI, Anthropic and Gemini SDKs against fake provider servers
on 127.0.0.1 that answer after `latency` (+ up to `jitter`) seconds. Each fake ranks the
passages by a grade hidden in their text, blurred by Gaussian `noise` of its own (grades are
about 10 apart), fixed per prompt: every configuration gets the same answer to the same prompt,
so adaptive and all-judges runs are compared at the same verdicts.

Reports, per configuration: wall time, critical path (sequential round-trips), recorded calls,
HTTP requests the providers received (calls still in flight when the top-K settled are
abandoned but billed), input tokens, cost at the default price table, and how many of the true
top-K the result puts in its first K places. Needs the dev extra (aiohttp), like the tests.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import grpc

from tierank.client import candidate, job_spec, judge
from tierank.server import logs
from tierank.server.app import background_server
from tierank.server.settings import ServerSettings
from tierank.v1 import rank_pb2, rank_pb2_grpc

# The fake provider servers are test fixtures first; they live with the tests.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "e2e"))
from graded_fakes import (
    PROVIDER_ENV,
    FakeLLMServer,
    FakeLLMThread,
    answer_by_grade,
    best_first,
    graded_pool,
    judges_config,
)

JUDGES = {
    "openai": "openai:gpt-4.1-mini",
    "anthropic": "anthropic:claude-haiku-4-5",
    "gemini": "gemini:gemini-2.5-flash",
}


@dataclass(frozen=True)
class Configuration:
    label: str
    flavors: tuple[str, ...]
    ensemble: str


CONFIGURATIONS = (
    Configuration("1 judge (openai)", ("openai",), "all"),
    Configuration("3 judges, adaptive (quorum 2)", ("openai", "anthropic", "gemini"), "adaptive"),
    Configuration("3 judges, all", ("openai", "anthropic", "gemini"), "all"),
)


@dataclass(frozen=True)
class Result:
    configuration: Configuration
    wall_s: float
    critical_path: int
    calls: int
    calls_by_judge: dict[str, int]
    requests: int
    input_tokens: int
    cost_usd: float
    reason: str
    top_k_found: int


async def run_configuration(
    configuration: Configuration, fake: FakeLLMServer, args: argparse.Namespace
) -> Result:
    pool = graded_pool(args.n, seed=args.seed, words=args.words)
    spec = job_spec(
        "which passage has the highest grade",
        [candidate(c.id, c.text) for c in pool],
        judges=[judge(JUDGES[f]) for f in configuration.flavors],
        rubric="a passage is better the higher its grade",
        batch_size=args.k,
        top_k=args.top_k,
        max_in_flight=args.max_in_flight,
        seed=args.seed,
        ensemble=configuration.ensemble,
    )
    requests_before = sum(len(fake.requests(f)) for f in JUDGES)
    with tempfile.TemporaryDirectory() as workdir:
        async with background_server(server_settings(fake, Path(workdir))) as address:
            started = time.monotonic()
            async with grpc.aio.insecure_channel(address) as channel:
                stub = rank_pb2_grpc.RankServiceStub(channel)
                job = await stub.CreateJob(rank_pb2.CreateJobRequest(spec=spec))
                last = None
                async for event in stub.WatchJob(rank_pb2.WatchJobRequest(name=job.name)):
                    last = event
            wall_s = time.monotonic() - started
    assert last is not None and last.HasField("completed"), last
    done = last.completed
    found = [cid for tier in done.tiers for cid in tier.candidate_ids][: args.top_k]
    return Result(
        configuration=configuration,
        wall_s=wall_s,
        critical_path=done.stats.critical_path,
        calls=done.stats.judge_calls,
        calls_by_judge={j.judge: j.calls for j in done.stats.judges},
        requests=sum(len(fake.requests(f)) for f in JUDGES) - requests_before,
        input_tokens=done.stats.input_tokens,
        cost_usd=done.stats.cost_usd,
        reason=rank_pb2.CompletionReason.Name(done.reason).removeprefix("COMPLETION_REASON_"),
        top_k_found=len(set(found) & set(best_first(pool)[: args.top_k])),
    )


def server_settings(fake: FakeLLMServer, workdir: Path) -> ServerSettings:
    config = workdir / "judges.json"
    config.write_text(json.dumps(judges_config(fake, prices={})))
    return ServerSettings(
        listen="127.0.0.1:0",
        db=workdir / "tierank.db",
        judges_config=config,
        shutdown_grace_s=2.0,
    )


def markdown(results: Sequence[Result], top_k: int) -> str:
    lines = [
        f"| configuration | wall s | critical path | calls | HTTP requests | input tokens "
        f"| cost USD | true top-{top_k} found | stop |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for r in results:
        per_judge = " + ".join(str(n) for n in r.calls_by_judge.values())
        calls = f"{r.calls} ({per_judge})" if len(r.calls_by_judge) > 1 else str(r.calls)
        lines.append(
            f"| {r.configuration.label} | {r.wall_s:.1f} | {r.critical_path} | {calls} "
            f"| {r.requests} | {r.input_tokens:,} | {r.cost_usd:.4f} "
            f"| {r.top_k_found}/{top_k} | {r.reason} |"
        )
    return "\n".join(lines)


def ensemble_saving(results: Sequence[Result]) -> str:
    by_mode = {r.configuration.ensemble: r for r in results if len(r.configuration.flavors) > 1}
    adaptive, every = by_mode["adaptive"], by_mode["all"]
    return (
        f"Adaptive ensemble: {adaptive.calls / every.calls:.0%} of the all-judges calls "
        f"({adaptive.calls} / {every.calls}), {adaptive.requests / every.requests:.0%} of its "
        f"HTTP requests ({adaptive.requests} / {every.requests}), "
        f"{adaptive.cost_usd / every.cost_usd:.0%} of its cost, "
        f"{adaptive.wall_s / every.wall_s:.0%} of its wall time."
    )


async def main_async(args: argparse.Namespace) -> None:
    logs.configure("warning", "json")
    for name in PROVIDER_ENV:  # only the fakes: no real key or endpoint is ever used
        os.environ.pop(name, None)
    results = []
    with FakeLLMThread() as fake:
        answer_by_grade(
            fake, tuple(JUDGES), latency_s=args.latency, jitter_s=args.jitter, noise=args.noise
        )
        for configuration in CONFIGURATIONS:
            results.append(await run_configuration(configuration, fake, args))
            print(f"done: {configuration.label}", file=sys.stderr)
    print(
        f"top-{args.top_k} of {args.n} at k={args.k}, provider latency {args.latency}s "
        f"(+ up to {args.jitter}s), judge noise {args.noise}, max in flight "
        f"{args.max_in_flight}, seed {args.seed}\n"
    )
    print(markdown(results, args.top_k))
    print()
    print(ensemble_saving(results))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=100, help="candidates")
    parser.add_argument("--k", type=int, default=10, help="candidates per judge call")
    parser.add_argument("--top-k", type=int, default=10, help="settle the top K")
    parser.add_argument("--latency", type=float, default=1.0, help="seconds per provider call")
    parser.add_argument("--jitter", type=float, default=0.3, help="extra seconds, at most")
    parser.add_argument("--noise", type=float, default=15.0, help="judge noise, in grade units")
    parser.add_argument("--words", type=int, default=60, help="words of filler per passage")
    parser.add_argument("--max-in-flight", type=int, default=30, help="judge calls in flight")
    parser.add_argument("--seed", type=int, default=0)
    asyncio.run(main_async(parser.parse_args()))


if __name__ == "__main__":
    main()
