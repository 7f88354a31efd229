"""Job specs over passages with a hidden score (read by fakes.rank_by_score), reading what
a real server answered (events, stats, field violations), and the CLI as a process."""

from __future__ import annotations

import subprocess
import sys

import anyio
import grpc

from tierank.client._errors import error_from_rpc
from tierank.v1 import rank_pb2, rank_pb2_grpc


def scored_spec(
    n: int, judges: list[rank_pb2.JudgeSpec], query: str = "which passage scores highest", **fields
) -> rank_pb2.JobSpec:
    """n candidates; c000 has the highest score, so best first is c000, c001, ..."""
    candidates = [
        rank_pb2.Candidate(id=f"c{i:03d}", text=f"passage c{i:03d} has score {n - i}.")
        for i in range(n)
    ]
    return rank_pb2.JobSpec(query=query, candidates=candidates, judges=judges, **fields)


def llm_judge(provider: str, model: str = "any-name", **parameters) -> rank_pb2.JudgeSpec:
    return rank_pb2.JudgeSpec(
        provider=provider, model=model, parameters=rank_pb2.JudgeParameters(**parameters)
    )


async def run_job(
    stub: rank_pb2_grpc.RankServiceStub, spec: rank_pb2.JobSpec
) -> list[rank_pb2.JobEvent]:
    return [event async for event in stub.Rank(rank_pb2.RankRequest(spec=spec), timeout=60)]


def completed(events: list[rank_pb2.JobEvent]) -> rank_pb2.JobCompleted:
    assert events and events[-1].HasField("completed"), events[-1:]
    return events[-1].completed


def verdicts(events: list[rank_pb2.JobEvent]) -> list[rank_pb2.VerdictReceived]:
    return [event.verdict for event in events if event.HasField("verdict")]


def judge_stats(done: rank_pb2.JobCompleted, name: str) -> rank_pb2.JudgeStats:
    (stats,) = [judge for judge in done.stats.judges if judge.judge == name]
    return stats


def field_violations(error: grpc.aio.AioRpcError) -> dict[str, str]:
    return {v.field: v.description for v in error_from_rpc(error).field_violations}


async def tierank(*args: str, timeout_s: float = 120) -> subprocess.CompletedProcess[str]:
    """`tierank ARGS` as a process, without blocking the event loop that serves the test's
    server and fake providers."""
    return await anyio.to_thread.run_sync(
        lambda: subprocess.run(
            [sys.executable, "-m", "tierank.client", *args],
            capture_output=True,
            text=True,
            timeout=timeout_s,
        )
    )
