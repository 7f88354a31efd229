"""Balanced presentation: pairs shown together again are shown the other way round, with the
same batches, the same judges and the same determinism as the plain shuffle."""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import replace
from itertools import combinations

import pytest

from tierank.scheduler import Cost, JudgeCall, Tournament, TournamentConfig, Verdict
from tierank.scheduler.positions import ShownOrder

IDS = [f"doc{i}" for i in range(60)]
CONFIG = TournamentConfig(
    batch_size=8, top_k=5, max_in_flight=4, judge_weights=(1.0, 1.0, 1.0), ensemble="adaptive"
)


def noisy(call: JudgeCall) -> Verdict:
    """A judge that answers the true order plus noise seeded by the call, whatever it is shown."""

    def utility(candidate: str) -> float:
        return IDS.index(candidate) + random.Random(f"7/{call.call_id}/{candidate}").gauss(0, 8)

    ordering = sorted(call.presented, key=utility)
    return Verdict(call.call_id, tuple(ordering), cost=Cost(calls=1))


def run(config: TournamentConfig) -> list[JudgeCall]:
    tournament = Tournament(IDS, config)
    planned: list[JudgeCall] = []
    pending: list[JudgeCall] = []
    while True:
        calls = tournament.plan()
        planned += calls
        pending += calls
        if tournament.stop_reason() is not None or not pending:
            return planned
        tournament.record(noisy(pending.pop(0)))


def leads(calls: list[JudgeCall]) -> tuple[Counter[tuple[str, str]], Counter[tuple[str, str]]]:
    """Per pair (sorted): times shown, and times the first was shown ahead less the reverse."""
    shown: Counter[tuple[str, str]] = Counter()
    lead: Counter[tuple[str, str]] = Counter()
    for call in calls:
        for ahead, behind in combinations(call.presented, 2):
            pair = (min(ahead, behind), max(ahead, behind))
            shown[pair] += 1
            lead[pair] += 1 if ahead == pair[0] else -1
    return shown, lead


def test_a_pair_shown_before_is_shown_the_other_way_round():
    order = ShownOrder()
    order.record([0, 1, 2, 3])
    assert order.lead(0, 3) == 1 and order.lead(3, 0) == -1
    assert order.balanced([0, 1, 2, 3]) == (3, 2, 1, 0)
    # Candidates new to each other keep the judge's shuffle; a known pair still turns round.
    assert order.balanced([5, 0, 4, 1]) == (5, 4, 1, 0)
    order.record([3, 2, 1, 0])
    assert order.balanced([2, 0, 3, 1]) == (2, 0, 3, 1), "balanced pairs keep the shuffle"


@pytest.mark.parametrize("seed", range(5))
def test_balanced_places_next_whoever_leads_fewest_of_those_left(seed):
    # The rule as documented, from `lead` alone, after many overlapping presentations.
    rng = random.Random(seed)
    shown = ShownOrder()
    for _ in range(60):
        shown.record(rng.sample(range(12), rng.randint(2, 8)))
        order = rng.sample(range(12), rng.randint(2, 8))
        left, expected = list(order), []
        while left:
            chosen = min(left, key=lambda a: sum(shown.lead(a, b) > 0 for b in left))
            left.remove(chosen)
            expected.append(chosen)
        assert shown.balanced(order) == tuple(expected)


def test_a_cycle_of_leads_is_broken_where_fewest_pairs_repeat_their_direction():
    order = ShownOrder()
    for presented in ([0, 1], [1, 2], [2, 0]):
        order.record(presented)
    result = order.balanced([0, 1, 2])
    assert sorted(result) == [0, 1, 2]
    assert sum(order.lead(a, b) > 0 for a, b in combinations(result, 2)) == 1


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_pairs_that_meet_again_balance_over_a_whole_job(seed):
    balanced_shown, balanced_lead = leads(run(replace(CONFIG, seed=seed)))
    shuffled_shown, shuffled_lead = leads(run(replace(CONFIG, seed=seed, balance_positions=False)))

    def both_ways(shown: Counter, lead: Counter) -> float:
        twice = [pair for pair, times in shown.items() if times == 2]
        return sum(lead[pair] == 0 for pair in twice) / len(twice)

    assert both_ways(balanced_shown, balanced_lead) == 1.0
    assert max(abs(lead) for lead in balanced_lead.values()) == 1
    assert both_ways(shuffled_shown, shuffled_lead) < 0.7


def test_balancing_changes_the_order_shown_but_not_the_batches_or_judges():
    """With a judge whose answers do not depend on the order shown, the job is the same call
    for call, except in the order each call presents its batch."""
    balanced = run(CONFIG)
    shuffled = run(replace(CONFIG, balance_positions=False))

    def membership(calls: list[JudgeCall]) -> list[tuple]:
        return [(c.call_id, c.batch, c.judge, frozenset(c.presented), c.depth) for c in calls]

    assert membership(balanced) == membership(shuffled)
    assert [c.presented for c in balanced] != [c.presented for c in shuffled]
    # A batch no earlier call overlaps keeps each judge's own shuffle.
    assert balanced[0].presented == shuffled[0].presented


def test_every_judge_of_a_fresh_batch_sees_the_previous_one_reversed_then_its_own_shuffle():
    config = replace(CONFIG, ensemble="all", max_in_flight=3)
    first, second, third = Tournament(IDS, config).plan()
    assert first.batch == second.batch == third.batch
    assert second.presented == first.presented[::-1]
    # After two mirror images every pair is even again: the third judge's plain shuffle.
    plain = Tournament(IDS, replace(config, balance_positions=False)).plan()
    assert third.presented == plain[2].presented


def test_balanced_presentation_is_deterministic_with_the_seed():
    assert run(CONFIG) == run(CONFIG)
    assert [c.presented for c in run(replace(CONFIG, seed=1))] != [c.presented for c in run(CONFIG)]


def test_adopted_calls_count_where_their_pairs_were_shown():
    config = TournamentConfig(batch_size=4, top_k=0, max_in_flight=1, judge_weights=(1, 1))
    tournament = Tournament(IDS[:8], config)
    shown = ("doc2", "doc0", "doc3", "doc1")
    tournament.adopt([JudgeCall("b0.j0", 0, 0, shown, 1)])
    tournament.record(Verdict("b0.j0", tuple(sorted(shown, key=IDS.index))))
    (call,) = tournament.plan()
    assert (call.batch, call.judge) == (0, 1)
    assert call.presented == shown[::-1]
