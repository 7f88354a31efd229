"""The offline judges over real gRPC: `lexical` is one order of the pool, both offline
judges refuse options they do not know or cannot honour (issue 13, items 22 and 33), and the
oracle's `profile` judges as the ranking benchmark's simulated judge of that name."""

from __future__ import annotations

import math
from collections.abc import Callable

import grpc
import pytest
from job_helpers import completed, field_violations, run_job, verdicts

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
        ("oracle", {"nosie": "0.1"}, "options.nosie", "known: bias, fail_rate, latency_ms"),
        ("oracle", {"latency_ms": "inf"}, "options.latency_ms", "from 0 to 60000"),
        ("oracle", {"latency_ms": "60001"}, "options.latency_ms", "from 0 to 60000"),
        ("oracle", {"fail_rate": "1.5"}, "options.fail_rate", "from 0 to 1"),
        ("oracle", {"fail_rate": "-0.1"}, "options.fail_rate", "from 0 to 1"),
        ("oracle", {"noise": "inf"}, "options.noise", "finite"),
        ("oracle", {"noise": "nan"}, "options.noise", "finite"),
        ("oracle", {"noise": "-1"}, "options.noise", "finite"),
        ("oracle", {"profile": "strongest"}, "options.profile", "known: chance, strong,"),
        ("oracle", {"profile": "weak", "noise": "-1"}, "options.noise", "finite"),
        ("oracle", {"profile": "weak", "fail_rate": "2"}, "options.fail_rate", "from 0 to 1"),
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


def _profiled_oracle(**options: str) -> rank_pb2.JudgeSpec:
    return rank_pb2.JudgeSpec(
        provider="oracle", parameters=rank_pb2.JudgeParameters(options=options)
    )


async def _judged_by(
    stub: rank_pb2_grpc.RankServiceStub, make_spec: SpecFactory, judge: rank_pb2.JudgeSpec
) -> list[rank_pb2.JobEvent]:
    """A full ordering of 100 candidates (c000 best), one call at a time, so that the same
    seed asks the same calls."""
    spec = make_spec(n=100, top_k=0, batch_size=10, max_in_flight=1, seed=3, judges=[judge])
    return await run_job(stub, spec)


def _misordered_share(events: list[rank_pb2.JobEvent]) -> float:
    """Of the pairs the answers state, the share against the hidden score."""
    stated = misordered = 0
    for verdict in verdicts(events):
        for i, better in enumerate(verdict.ordering):
            for worse in verdict.ordering[i + 1 :]:
                stated += 1
                misordered += better > worse  # c000 has the highest score
    return misordered / stated


async def test_a_position_biased_profile_is_caught_and_its_unbiased_twin_is_not(
    stub: rank_pb2_grpc.RankServiceStub, make_spec: SpecFactory
) -> None:
    """strong-position is strong plus a real small judge's habit of repeating the shown order
    or putting the first-shown candidate first: the server's own position-bias evidence must
    tell them apart, on the same candidates and seed."""
    unbiased = completed(await _judged_by(stub, make_spec, _profiled_oracle(profile="strong")))
    biased = completed(
        await _judged_by(stub, make_spec, _profiled_oracle(profile="strong-position"))
    )

    assert unbiased.reason == rank_pb2.COMPLETION_REASON_SETTLED
    (honest,) = [judge.position_bias for judge in unbiased.stats.judges]
    assert not honest.biased and abs(honest.mean_tau) < 0.15
    assert biased.reason == rank_pb2.COMPLETION_REASON_POSITION_BIASED
    (following,) = [judge.position_bias for judge in biased.stats.judges]
    assert following.biased and following.mean_tau > 0.25


async def test_a_profile_preferring_the_last_shown_position_is_caught(
    stub: rank_pb2_grpc.RankServiceStub, make_spec: SpecFactory
) -> None:
    """weak-last-first starts most answers with the last-shown candidate and goes on in the
    shown order, as a real small model did at k = 5 (issue 34 item 23): Kendall tau with the
    shown order stays small, where the first pick was shown does not."""
    judge = _profiled_oracle(profile="weak-last-first")
    spec = make_spec(n=40, top_k=0, batch_size=5, max_in_flight=1, seed=3, judges=[judge])
    done = completed(await run_job(stub, spec))

    assert done.reason == rank_pb2.COMPLETION_REASON_POSITION_BIASED
    (bias,) = [judge.position_bias for judge in done.stats.judges]
    assert bias.biased and abs(bias.mean_tau) < 0.25
    assert bias.first_pick_position > 0.75 and bias.first_pick_z > 3.89


async def test_the_weak_profile_misorders_what_the_strong_one_gets_right(
    stub: rank_pb2_grpc.RankServiceStub, make_spec: SpecFactory
) -> None:
    strong = await _judged_by(stub, make_spec, _profiled_oracle(profile="strong"))
    weak = await _judged_by(stub, make_spec, _profiled_oracle(profile="weak"))
    exact = await _judged_by(stub, make_spec, _profiled_oracle(noise="0"))

    assert _misordered_share(exact) == 0
    assert 0 < _misordered_share(strong) < 0.1
    assert _misordered_share(weak) > 2 * _misordered_share(strong)


async def test_options_given_with_a_profile_replace_its_own(
    stub: rank_pb2_grpc.RankServiceStub, make_spec: SpecFactory
) -> None:
    # The weak profile fails 2% of its calls; fail_rate=1 makes it fail every one.
    events = await _judged_by(stub, make_spec, _profiled_oracle(profile="weak", fail_rate="1"))

    answered = verdicts(events)
    assert answered and not any(verdict.ordering for verdict in answered)
    (judge,) = completed(events).stats.judges
    assert judge.failed_calls == len(answered) and "simulated a bad answer" in judge.last_error
