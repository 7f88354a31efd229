"""The offline judges over real gRPC: `lexical` is one order of the pool, and both offline
judges refuse options they do not know or cannot honour (issue 13, items 22 and 33)."""

from __future__ import annotations

from collections.abc import Callable

import grpc
import pytest
from job_helpers import field_violations

from tierank.v1 import rank_pb2, rank_pb2_grpc

SpecFactory = Callable[..., rank_pb2.JobSpec]


async def test_lexical_batches_never_contradict_each_other(
    stub: rank_pb2_grpc.RankServiceStub, make_spec: SpecFactory
) -> None:
    # Candidates 6.. match no query term: equal BM25 scores, shown in every batch's own shuffle.
    spec = make_spec(n=30, top_k=0, batch_size=5, seed=7)
    events = [e async for e in stub.Rank(rank_pb2.RankRequest(spec=spec), timeout=60)]
    orderings = [e.verdict.ordering for e in events if e.HasField("verdict")]
    assert len(orderings) > 6

    stated: set[tuple[str, str]] = set()
    for ordering in orderings:
        stated |= {(a, b) for i, a in enumerate(ordering) for b in ordering[i + 1 :]}
    contradicted = {(a, b) for a, b in stated if (b, a) in stated}
    assert not contradicted
    # Ties go to the pool's order, so the settled order is the pool's among the tied ones.
    final = [c for tier in events[-1].completed.tiers for c in tier.candidate_ids]
    assert final == [f"c{i:03d}" for i in range(30)]


@pytest.mark.parametrize(
    ("provider", "options", "field", "rule"),
    [
        ("lexical", {"noise": "0.1"}, "options.noise", "unknown option for lexical"),
        ("oracle", {"nosie": "0.1"}, "options.nosie", "known: fail_rate, latency_ms"),
        ("oracle", {"latency_ms": "inf"}, "options.latency_ms", "from 0 to 60000"),
        ("oracle", {"latency_ms": "60001"}, "options.latency_ms", "from 0 to 60000"),
        ("oracle", {"fail_rate": "1.5"}, "options.fail_rate", "from 0 to 1"),
        ("oracle", {"fail_rate": "-0.1"}, "options.fail_rate", "from 0 to 1"),
        ("oracle", {"noise": "inf"}, "options.noise", "finite"),
        ("oracle", {"noise": "nan"}, "options.noise", "finite"),
        ("oracle", {"noise": "-1"}, "options.noise", "finite"),
    ],
)
async def test_offline_judges_refuse_options_they_cannot_honour(
    stub: rank_pb2_grpc.RankServiceStub,
    make_spec: SpecFactory,
    provider: str,
    options: dict[str, str],
    field: str,
    rule: str,
) -> None:
    judge = rank_pb2.JudgeSpec(
        provider=provider, parameters=rank_pb2.JudgeParameters(options=options)
    )
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await stub.CreateJob(rank_pb2.CreateJobRequest(spec=make_spec(n=4, judges=[judge])))
    assert refused.value.code() is grpc.StatusCode.INVALID_ARGUMENT
    violations = field_violations(refused.value)
    assert rule in violations[f"spec.judges[0].parameters.{field}"], violations
    listed = await stub.ListJobs(rank_pb2.ListJobsRequest())
    assert not listed.jobs
