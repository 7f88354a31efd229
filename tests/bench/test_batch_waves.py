"""The batch-mode model of a study (bench/batch_waves) on a small study: its waves against the
scheduler's own counts, the benchmark's runs and the slot schedule, and its bill against the
price table and the vendors' limits. Nothing is timed."""

from __future__ import annotations

import asyncio
import math

import pytest

from tierank.bench.batch_waves import (
    MODELS,
    StudyQuery,
    WaveStudy,
    bill,
    bills,
    build_transports,
    run_blitzrank_waves,
    run_tierank_waves,
    slot_schedule,
    study_queries,
)
from tierank.bench.ranking.data import load_queries
from tierank.bench.ranking.experiment import Task, run_task
from tierank.server.judges.batches import transport_for
from tierank.server.judges.batches.base import BatchLimits
from tierank.server.judges.prices import DEFAULT_PRICES, cost_usd, find_price
from tierank.server.judges.providers import PROVIDERS_BY_NAME

pytestmark = pytest.mark.usefixtures("shared_data")
# More queries than DL19's first few, so that a second seed comes round (43 queries a pass).
QUERIES = 12


@pytest.fixture(scope="module")
def study() -> list[StudyQuery]:
    queries = load_queries()
    # Two passes over 6 queries: each at seeds 0 and 1.
    return study_queries(queries[:6], QUERIES, seed=0)


@pytest.fixture(scope="module")
def all_live(study: list[StudyQuery]) -> WaveStudy:
    return run_tierank_waves(study)


def calls_per_query(run: WaveStudy) -> dict[int, int]:
    counts: dict[int, int] = {}
    for wave in run.waves:
        for call in wave:
            counts[call.query] = counts.get(call.query, 0) + 1
    return counts


def test_all_live_the_waves_are_the_longest_critical_path_and_the_calls_the_schedulers(
    study: list[StudyQuery], all_live: WaveStudy
) -> None:
    outcomes = all_live.queries
    assert set(outcomes) == {item.index for item in study}
    assert len(all_live.waves) == max(q.critical_path for q in outcomes.values())
    assert all(q.start_wave == 1 and q.rounds == q.critical_path for q in outcomes.values())
    assert calls_per_query(all_live) == {index: q.calls for index, q in outcomes.items()}
    # Each query's calls fill the waves from its first to its last, none skipped.
    for index, outcome in outcomes.items():
        waves_with_it = [
            n for n, wave in enumerate(all_live.waves, 1) if any(c.query == index for c in wave)
        ]
        assert waves_with_it == list(range(1, outcome.rounds + 1))
    assert all(q.stop in ("settled", "exhausted") for q in outcomes.values()), outcomes


def test_each_query_runs_as_the_ranking_benchmark_runs_it(
    study: list[StudyQuery], all_live: WaveStudy
) -> None:
    """The same judge-noise streams as section 5's runs: the same calls and critical paths."""
    for method, run in (("tierank", all_live), ("blitzrank-k10", run_blitzrank_waves(study))):
        for seed in (0, 1):
            queries = [item.query for item in study if item.seed == seed]
            records = run_task(Task("strong", method, seed), queries)
            ours = [run.queries[item.index] for item in study if item.seed == seed]
            assert [(r.calls, r.critical_path) for r in records] == [
                (q.calls, q.critical_path) for q in ours
            ], method


def test_blitzrank_asks_one_call_a_round_and_waits_for_its_slowest_query(
    study: list[StudyQuery],
) -> None:
    run = run_blitzrank_waves(study)
    rounds = [q.rounds for q in run.queries.values()]
    assert len(run.waves) == max(rounds)
    assert calls_per_query(run) == {index: q.rounds for index, q in run.queries.items()}
    assert [len(wave) for wave in run.waves] == [
        sum(r >= n for r in rounds) for n in range(1, max(rounds) + 1)
    ]


def test_a_live_cap_starts_queries_as_slots_free_as_the_slot_schedule_says(
    study: list[StudyQuery], all_live: WaveStudy
) -> None:
    capped = run_tierank_waves(study, live=3)
    paths = [all_live.queries[item.index].critical_path for item in study]
    assert len(capped.waves) == slot_schedule(paths, 3) > len(all_live.waves)
    # The queries are independent: each does the same wherever its waves fall.
    for index, outcome in capped.queries.items():
        alone = all_live.queries[index]
        assert (outcome.calls, outcome.critical_path) == (alone.calls, alone.critical_path)
        assert outcome.start_wave + outcome.rounds - 1 <= len(capped.waves)
    assert all(len({call.query for call in wave}) <= 3 for wave in capped.waves)


def test_the_batch_bill_is_the_per_call_bill_at_the_batch_fraction(
    study: list[StudyQuery], all_live: WaveStudy
) -> None:
    calls = sum(len(wave) for wave in all_live.waves)
    for vendor in bills(study, all_live.waves, MODELS):
        provider, _, model = vendor.model.partition("/")
        price = find_price(DEFAULT_PRICES, provider, model)
        assert vendor.per_call_usd == cost_usd(vendor.tokens, price) > 0
        assert vendor.batch_usd == pytest.approx(
            vendor.per_call_usd * PROVIDERS_BY_NAME[provider].batch_price_fraction, rel=1e-12
        )
        # One batch per wave: a small study is far inside every vendor's limits.
        assert vendor.batches == len(all_live.waves)
        # The server's prompt with ~10 DL19 passages: some hundreds of tokens each call.
        assert 500 * calls < vendor.tokens.input < 3000 * calls


def test_a_wave_is_split_only_where_the_vendors_limits_require(
    study: list[StudyQuery], all_live: WaveStudy
) -> None:
    factory, (transport, *_) = build_transports(MODELS[:1])
    try:
        limit = 7
        small = transport_for(transport.judge, BatchLimits(limit, 10**9, "test"))
        split = bill(study, all_live.waves, small)
        assert split.batches == sum(math.ceil(len(wave) / limit) for wave in all_live.waves)
        assert split.largest_requests == limit
        # Bytes: half the largest payload as the limit splits at least that wave.
        whole = bill(study, all_live.waves, transport)
        one_each = transport_for(transport.judge, BatchLimits(None, whole.largest_bytes // 2, "t"))
        assert bill(study, all_live.waves, one_each).batches > whole.batches
        assert split.tokens == whole.tokens
    finally:
        asyncio.run(factory.aclose())
