"""The offline judges over real gRPC: `lexical` is one order of the pool, and both offline
judges refuse options they do not know or cannot honour (issue 13, items 22 and 33)."""

from __future__ import annotations

import math
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


def _reference_bm25(query: str, texts: dict[str, str]) -> dict[str, float]:
    """BM25 as Anserini sums it: every occurrence of a query term counts."""
    k1, b = 0.9, 0.4
    docs = {pid: text.lower().split() for pid, text in texts.items()}
    average = sum(len(words) for words in docs.values()) / len(docs)
    scores = {}
    for pid, words in docs.items():
        score = 0.0
        for term in query.lower().split():
            df = sum(term in other for other in docs.values())
            f = words.count(term)
            if f:
                idf = math.log(1 + (len(docs) - df + 0.5) / (df + 0.5))
                score += idf * f * (k1 + 1) / (f + k1 * (1 - b + b * len(words) / average))
        scores[pid] = score
    return scores


async def test_lexical_counts_every_occurrence_of_a_repeated_query_term(
    stub: rank_pb2_grpc.RankServiceStub,
) -> None:
    # "wax" three times outweighs one "dance"; counted once, "dance" (rarer) would win.
    texts = {
        "dance": "dance alpha beta gamma",
        "wax": "wax wax delta epsilon",
        "both": "dance wax zeta eta",
        "none": "theta iota kappa lambda",
        "wax2": "wax mu nu xi",
    }
    query = "wax wax wax dance"
    spec = rank_pb2.JobSpec(
        query=query,
        candidates=[rank_pb2.Candidate(id=pid, text=text) for pid, text in texts.items()],
        judges=[rank_pb2.JudgeSpec(provider="lexical")],
        batch_size=5,
    )
    events = [e async for e in stub.Rank(rank_pb2.RankRequest(spec=spec), timeout=60)]
    ordering = next(e.verdict.ordering for e in events if e.HasField("verdict"))
    reference = _reference_bm25(query, texts)
    assert list(ordering) == sorted(texts, key=lambda pid: -reference[pid])


@pytest.mark.parametrize("score", ["inf", "-inf", "nan", "1e400"])
async def test_the_oracle_refuses_a_score_that_is_not_finite(
    stub: rank_pb2_grpc.RankServiceStub, make_spec: SpecFactory, score: str
) -> None:
    spec = make_spec(n=4, judges=[rank_pb2.JudgeSpec(provider="oracle")])
    spec.candidates[2].metadata["score"] = score
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await stub.CreateJob(rank_pb2.CreateJobRequest(spec=spec))
    assert refused.value.code() is grpc.StatusCode.INVALID_ARGUMENT
    rule = field_violations(refused.value)["spec.judges[0].parameters.options.score_key"]
    assert "finite numeric" in rule and "'c002'" in rule
