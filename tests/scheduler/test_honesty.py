"""No vote is ever invented: failed verdicts add nothing, partial ones only what they state."""

import random
from collections import Counter
from itertools import combinations, permutations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tierank.scheduler import Cost, Tournament, TournamentConfig, Verdict

IDS = [f"doc{i}" for i in range(12)]


def all_votes(tournament: Tournament) -> dict[tuple[str, str], float]:
    return {(a, b): tournament.votes_for(a, b) for a, b in permutations(IDS, 2)}


def test_failed_verdict_changes_nothing_but_the_spend():
    tournament = Tournament(IDS, TournamentConfig(batch_size=4, max_in_flight=3))
    first, second, third = tournament.plan()
    before = (tournament.tiers(), all_votes(tournament), tournament.settled_count)
    tournament.record(Verdict(first.call_id, first.presented, failed=True, cost=Cost(calls=1)))
    assert (tournament.tiers(), all_votes(tournament), tournament.settled_count) == before
    assert tournament.in_flight == {second.call_id, third.call_id}
    assert tournament.spent == Cost(calls=1)


def test_partial_verdict_adds_only_the_pairs_among_listed_ids():
    tournament = Tournament(IDS, TournamentConfig(batch_size=4, max_in_flight=1))
    (call,) = tournament.plan()
    stated = (call.presented[2], call.presented[0])
    tournament.record(Verdict(call.call_id, stated))
    assert {pair for pair, votes in all_votes(tournament).items() if votes} == {stated}
    assert tournament.votes_for(*stated) == 1.0


def test_failed_batch_is_asked_again_later(sim):
    tournament = Tournament(IDS, TournamentConfig(batch_size=4, top_k=0, max_in_flight=1))
    (call,) = tournament.plan()
    tournament.record(Verdict(call.call_id, failed=True))
    planned = sim.drive(tournament, sim.oracle(IDS))
    assert sim.flat(tournament) == IDS
    assert any(set(call.presented) & set(later.presented) for later in planned)


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda call: Verdict(call.call_id, (*call.presented, "doc99")), "not presented"),
        (lambda call: Verdict(call.call_id, (call.presented[0], call.presented[0])), "twice"),
        (lambda call: Verdict("b7.j3", call.presented), "unknown"),
    ],
)
def test_invalid_verdicts_are_rejected_and_leave_no_trace(mutate, message):
    tournament = Tournament(IDS, TournamentConfig(batch_size=4, max_in_flight=1))
    (call,) = tournament.plan()
    before = (all_votes(tournament), tournament.in_flight, tournament.spent)
    with pytest.raises(ValueError, match=message):
        tournament.record(mutate(call))
    assert (all_votes(tournament), tournament.in_flight, tournament.spent) == before


def test_recording_a_call_twice_is_rejected():
    tournament = Tournament(IDS, TournamentConfig(batch_size=4, max_in_flight=1))
    (call,) = tournament.plan()
    tournament.record(Verdict(call.call_id, call.presented))
    with pytest.raises(ValueError, match="already recorded"):
        tournament.record(Verdict(call.call_id, call.presented))


@settings(max_examples=30, deadline=None)
@given(
    seed=st.integers(0, 2**32),
    weights=st.lists(st.sampled_from([0.5, 1.0, 2.0]), min_size=1, max_size=3),
    ensemble=st.sampled_from(["all", "adaptive"]),
)
def test_tallies_equal_exactly_what_was_stated(seed, weights, ensemble):
    """A judge that fails, truncates and answers at random; the tallies must match its words."""
    rng = random.Random(seed)
    config = TournamentConfig(
        batch_size=5, top_k=0, max_in_flight=3, judge_weights=tuple(weights), ensemble=ensemble
    )
    tournament = Tournament(IDS, config)
    expected: Counter[tuple[str, str]] = Counter()
    pending = []
    for _ in range(60):
        pending += tournament.plan()
        if tournament.stop_reason() is not None or not pending:
            break
        call = pending.pop(rng.randrange(len(pending)))
        if rng.random() < 0.2:
            tournament.record(Verdict(call.call_id, call.presented, failed=True))
            continue
        ordering = rng.sample(call.presented, rng.randint(0, len(call.presented)))
        tournament.record(Verdict(call.call_id, tuple(ordering)))
        for winner, loser in combinations(ordering, 2):
            expected[winner, loser] += weights[call.judge]
    assert all_votes(tournament) == pytest.approx(
        {pair: expected.get(pair, 0.0) for pair in permutations(IDS, 2)}
    )


@pytest.mark.parametrize(
    ("ids", "config"),
    [
        (["a", "a"], TournamentConfig()),
        (IDS, TournamentConfig(batch_size=1)),
        (IDS, TournamentConfig(top_k=-1)),
        (IDS, TournamentConfig(max_in_flight=0)),
        (IDS, TournamentConfig(judge_weights=())),
        (IDS, TournamentConfig(judge_weights=(1.0, float("nan")))),
        (IDS, TournamentConfig(judge_weights=(-1.0,))),
        (IDS, TournamentConfig(quorum=0)),
    ],
)
def test_bad_setups_are_rejected(ids, config):
    with pytest.raises(ValueError):
        Tournament(ids, config)


def test_disabling_an_unknown_judge_is_rejected():
    with pytest.raises(ValueError, match="no judge 1"):
        Tournament(IDS, TournamentConfig()).disable_judge(1)
