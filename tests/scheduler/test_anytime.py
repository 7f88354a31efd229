"""Anytime ranking: the tiers' order is the best estimate the votes allow, within what is known,
and a budget too small for the default plan is planned for from the start."""

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from tierank.scheduler import (
    Budget,
    Cost,
    JudgeCall,
    StopReason,
    Tournament,
    TournamentConfig,
    Verdict,
)
from tierank.scheduler.graph import MajorityGraph
from tierank.scheduler.ordering import tiers_best_first
from tierank.scheduler.strength import Strengths
from tierank.scheduler.votes import VoteTally


def bradley_terry(size: int, votes, lean: float) -> list[float]:
    strengths = Strengths(size, lean)
    for winner, loser, weight in votes:
        strengths.add_ordering((winner, loser), weight)
    return strengths.fit()


def test_a_win_over_a_strong_candidate_counts_for_more_than_one_over_a_weak_one():
    # 0 beat 1, who beat 2 and 3; 4 beat 5, who beat nobody. Both 0 and 4 won once.
    votes = [(0, 1, 1.0), (1, 2, 1.0), (1, 3, 1.0), (4, 5, 1.0)]
    strength = bradley_terry(6, votes, lean=0.0)
    assert strength[0] > strength[4]
    assert strength[1] > strength[5]


def test_complete_transitive_votes_are_recovered_under_a_weak_prior():
    truth = [3, 0, 4, 1, 2]
    votes = [(truth[i], truth[j], 1.0) for i in range(len(truth)) for j in range(i + 1, len(truth))]
    for prior in (0.0, 0.5):
        strength = bradley_terry(5, votes, prior)
        assert sorted(range(5), key=lambda c: -strength[c]) == truth


def test_candidates_without_votes_keep_the_first_stage_order():
    strength = bradley_terry(4, [], lean=0.5)
    assert strength == sorted(strength, reverse=True)
    assert len(set(strength)) == 4


def test_strengths_are_the_same_for_the_same_votes():
    rng = random.Random(7)
    votes = [(rng.randrange(30), rng.randrange(30), 1.0) for _ in range(200)]
    votes = [(a, b, w) for a, b, w in votes if a != b]
    assert bradley_terry(30, votes, 0.5) == bradley_terry(30, votes, 0.5)


@settings(max_examples=60, deadline=None)
@given(
    size=st.integers(2, 14),
    orderings=st.lists(st.permutations(range(14)), max_size=12),
    shown=st.lists(st.integers(2, 6), min_size=12, max_size=12),
    strength_seed=st.integers(0, 1000),
)
def test_the_order_keeps_every_known_relation(size, orderings, shown, strength_seed):
    tally, graph = VoteTally([1.0]), MajorityGraph(size)
    for ordering, length in zip(orderings, shown, strict=False):
        graph.apply(tally.add_ordering(0, [c for c in ordering if c < size][:length]))
    standings = graph.standings()
    rng = random.Random(strength_seed)
    strength = [rng.random() for _ in range(size)]
    order = tiers_best_first(standings, strength)
    assert sorted(order) == list(range(len(standings.component_members)))
    start = 0
    for place, component in enumerate(order):
        # Nothing known below a component is listed above it.
        for other in order[:place]:
            assert not standings.component_bits[other] & standings.below_bits[component]
        # A settled component (its relation to all known) sits where every order puts it.
        if not standings.unknown_bits[component]:
            assert start == standings.above_bits[component].bit_count()
        start += len(standings.component_members[component])


@settings(max_examples=60, deadline=None)
@given(
    size=st.integers(2, 14),
    orderings=st.lists(st.permutations(range(14)), max_size=12),
    shown=st.lists(st.integers(2, 6), min_size=12, max_size=12),
    strength_seed=st.integers(0, 1000),
)
def test_the_order_is_the_strongest_ready_component_at_every_step(
    size, orderings, shown, strength_seed
):
    # The definition, step by step: of the components whose every known superior is placed,
    # the one with the strongest member (ties: the lowest first member) goes next.
    tally, graph = VoteTally([1.0]), MajorityGraph(size)
    for ordering, length in zip(orderings, shown, strict=False):
        graph.apply(tally.add_ordering(0, [c for c in ordering if c < size][:length]))
    standings = graph.standings()
    rng = random.Random(strength_seed)
    # Few distinct values, so that ties between components occur.
    strength = [rng.choice([0.0, 0.5, 1.0]) for _ in range(size)]
    expected, placed = [], 0
    while len(expected) < len(standings.component_members):
        ready = [
            component
            for component, above in enumerate(standings.above_bits)
            if component not in expected and not above & ~placed
        ]
        members = standings.component_members
        best = min(ready, key=lambda c: (-max(strength[m] for m in members[c]), members[c][0]))
        expected.append(best)
        placed |= standings.component_bits[best]
    assert tiers_best_first(standings, strength) == tuple(expected)


# -- budgets planned for from the start ------------------------------------------------------

IDS = [f"doc{i}" for i in range(100)]


def _tokens(call: JudgeCall) -> Cost:
    return Cost(calls=1, input_tokens=100 * len(call.presented))


def test_a_budget_too_small_for_the_pool_shows_its_head_first(sim):
    full_wave = 100 * len(IDS)  # every candidate once
    budget = Budget(max_input_tokens=int(0.8 * full_wave))
    tournament = Tournament(IDS, TournamentConfig(budget=budget, top_k=10))
    first = tournament.plan(_tokens)
    shown = {c for call in first for c in call.presented}
    # The head the budget can pay for with a refinement reserve kept, nothing of the tail.
    assert 30 <= len(shown) < 80
    assert shown == set(IDS[: len(shown)])
    judge = _charged(sim.oracle(IDS))
    for call in first:
        tournament.record(judge(call))
    spent_on_head = tournament.spent.input_tokens
    shown_at_all = set(shown)
    while (calls := tournament.plan(_tokens)) and tournament.stop_reason() is None:
        for call in calls:
            shown_at_all |= set(call.presented)
            tournament.record(judge(call))
    assert tournament.stop_reason() in (StopReason.BUDGET_EXHAUSTED, StopReason.SETTLED)
    assert tournament.spent.input_tokens <= budget.max_input_tokens
    assert tournament.spent.input_tokens > spent_on_head, "the reserve went to later rounds"
    # Candidates never shown are listed where the first stage put them, not ahead of the
    # head's winners as candidates nobody is known to beat.
    never_shown = set(IDS) - shown_at_all
    listed = [m for tier in tournament.tiers() for m in tier.members]
    assert never_shown and not never_shown & set(listed[:10])


def _charged(judge):
    def answer(call: JudgeCall) -> Verdict:
        verdict = judge(call)
        return Verdict(verdict.call_id, verdict.ordering, cost=_tokens(call))

    return answer


def test_an_ample_budget_plans_exactly_the_default_calls(sim):
    unbudgeted = Tournament(IDS, TournamentConfig(top_k=10))
    ample = Tournament(IDS, TournamentConfig(top_k=10, budget=Budget(max_input_tokens=10**7)))
    judge = sim.oracle(list(reversed(IDS)))
    default_calls = [(c.call_id, c.presented) for c in _drive_with_tokens(unbudgeted, judge)]
    assert default_calls == [(c.call_id, c.presented) for c in _drive_with_tokens(ample, judge)]


def test_the_rest_of_the_pool_is_shown_once_the_head_needs_nothing_more(sim):
    ids = IDS[:30]
    # The whole first wave is 3 calls; 4 calls leave too little reserve for all of it, so the
    # head of 20 goes first and the last 10 wait.
    config = TournamentConfig(top_k=2, budget=Budget(max_calls=4))
    tournament = Tournament(ids, config)
    planned = _drive_with_tokens(tournament, sim.oracle(ids))
    tail = set(ids[20:])
    first_tail_call = next(i for i, call in enumerate(planned) if tail & set(call.presented))
    assert first_tail_call >= 3, "the tail waited for the head's later rounds"
    assert set(planned[first_tail_call].presented) == tail
    assert len(planned) <= 4


def _drive_with_tokens(tournament: Tournament, judge) -> list[JudgeCall]:
    planned, pending = [], []
    while True:
        calls = tournament.plan(_tokens)
        planned += calls
        pending += calls
        if tournament.stop_reason() is not None or not pending:
            return planned
        tournament.record(judge(pending.pop(0)))


def test_the_final_order_differs_from_a_provisional_one_only_where_relations_are_open(sim):
    ids = [f"d{i}" for i in range(60)]
    rng = random.Random(3)
    truth = list(ids)
    rng.shuffle(truth)
    tournament = Tournament(ids, TournamentConfig(top_k=10, budget=Budget(max_calls=10)))
    sim.drive(tournament, sim.oracle(truth))
    provisional, final = tournament.tiers(), tournament.tiers(final=True)
    assert sorted((t.members, t.settled) for t in provisional) == sorted(
        (t.members, t.settled) for t in final
    )
    # A settled tier inside the top 10 sits where every order consistent with the votes puts
    # it (beyond it, "settled" means only "cannot reach the top 10").
    rank_in_provisional = {t.members: t.rank for t in provisional}
    inside = [t for t in final if t.settled and t.rank <= 10]
    assert inside and tournament.stop_reason() is StopReason.BUDGET_EXHAUSTED
    for tier in inside:
        assert rank_in_provisional[tier.members] == tier.rank
