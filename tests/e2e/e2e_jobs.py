"""Small helpers for driving jobs over gRPC and reading their events, for the e2e tests."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from fakes import Answer
from graded_fakes import MODELS, GradedCandidate

from tierank.client import candidate, job_spec, judge
from tierank.v1 import rank_pb2, rank_pb2_grpc


def llm_judge(flavor: str) -> rank_pb2.JudgeSpec:
    return judge(f"{flavor}:{MODELS[flavor]}")


def judge_name(flavor: str) -> str:
    """The server's default display name, "provider/model"."""
    return f"{flavor}/{MODELS[flavor]}"


def graded_spec(
    pool: Sequence[GradedCandidate], flavors: Iterable[str], **fields: object
) -> rank_pb2.JobSpec:
    return job_spec(
        "which passage has the highest grade",
        [candidate(c.id, c.text) for c in pool],
        judges=[llm_judge(f) for f in flavors],
        rubric="a passage is better the higher its grade",
        **fields,  # type: ignore[arg-type]
    )


async def run_job(
    stub: rank_pb2_grpc.RankServiceStub, spec: rank_pb2.JobSpec, request_id: str
) -> list[rank_pb2.JobEvent]:
    job = await stub.CreateJob(rank_pb2.CreateJobRequest(spec=spec, request_id=request_id))
    return [e async for e in stub.WatchJob(rank_pb2.WatchJobRequest(name=job.name))]


def verdicts(
    events: Iterable[rank_pb2.JobEvent], judge: str | None = None
) -> list[rank_pb2.VerdictReceived]:
    return [
        e.verdict
        for e in events
        if e.HasField("verdict") and (judge is None or e.verdict.judge == judge)
    ]


def completed(events: Sequence[rank_pb2.JobEvent]) -> rank_pb2.JobCompleted:
    assert events[-1].HasField("completed"), events[-1]
    return events[-1].completed


def flatten(tiers: Iterable[rank_pb2.Tier]) -> list[str]:
    return [cid for tier in tiers for cid in tier.candidate_ids]


def judge_stats(stats: rank_pb2.JobStats, name: str) -> rank_pb2.JudgeStats:
    (found,) = [j for j in stats.judges if j.judge == name]
    return found


def expected_cost(answer: Answer, price: Mapping[str, float]) -> float:
    """USD for one answer, from the provider's token counts and the configured price."""
    uncached = answer.input_tokens - answer.cached_input_tokens
    return (
        uncached * price["input"]
        + answer.cached_input_tokens * price["cached_input"]
        + answer.output_tokens * price["output"]
    ) / 1_000_000
