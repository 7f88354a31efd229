"""Adopting calls planned earlier, possibly under other rules: how a job planned by an older
planner version goes on without asking any recorded call again."""

from __future__ import annotations

import random

import pytest

from tierank.scheduler import (
    Cost,
    FrontierStrategy,
    JudgeCall,
    StopReason,
    Tournament,
    TournamentConfig,
    Verdict,
)
from tierank.scheduler.selection import first_wave_in_prior_order

IDS = [f"doc{i}" for i in range(40)]
CONFIG = TournamentConfig(batch_size=8, top_k=5, max_in_flight=3, judge_weights=(1.0, 0.8))


class ReversedFirstWave(FrontierStrategy):
    """Other planning rules: the same first wave, tail first."""

    def first_wave(self, size: int, batch_size: int, top_k: int) -> list[tuple[int, ...]]:
        return first_wave_in_prior_order(size, batch_size, top_k)[::-1]


def oracle(call: JudgeCall) -> Verdict:
    ordering = tuple(sorted(call.presented, key=IDS.index))
    return Verdict(call.call_id, ordering, cost=Cost(calls=1))


def run_for(tournament: Tournament, records: int) -> list[tuple[str, object]]:
    """Plan and record answers oldest first, `records` times; the journal of what happened."""
    journal: list[tuple[str, object]] = []
    pending: list[JudgeCall] = []
    for _ in range(records):
        calls = tournament.plan()
        if calls:
            journal.append(("plan", calls))
        pending += calls
        verdict = oracle(pending.pop(0))
        tournament.record(verdict)
        journal.append(("record", verdict))
    return journal


def adopted(journal: list[tuple[str, object]], tournament: Tournament) -> Tournament:
    for kind, entry in journal:
        if kind == "plan":
            tournament.adopt(entry)  # type: ignore[arg-type]
        else:
            tournament.record(entry)  # type: ignore[arg-type]
    return tournament


def test_adopting_calls_planned_by_the_same_rules_rebuilds_the_same_tournament():
    original = Tournament(IDS, CONFIG)
    journal = run_for(original, 9)
    rebuilt = adopted(journal, Tournament(IDS, CONFIG))
    assert rebuilt.in_flight == original.in_flight
    assert rebuilt.tiers() == original.tiers()
    assert (rebuilt.spent, rebuilt.reserved) == (original.spent, original.reserved)
    assert rebuilt.critical_path == original.critical_path
    # Both go on identically from here.
    assert rebuilt.plan() == original.plan()


def test_calls_adopted_under_other_rules_are_never_planned_again():
    original = Tournament(IDS, CONFIG)
    journal = run_for(original, 4)
    recorded = {c.call_id: c for kind, calls in journal if kind == "plan" for c in calls}
    in_flight = set(original.in_flight)
    assert in_flight, "some recorded calls are still unanswered"

    resumed = adopted(journal, Tournament(IDS, CONFIG, ReversedFirstWave()))
    assert resumed.in_flight == in_flight
    shown = {c for call in recorded.values() for c in call.presented}
    planned: list[JudgeCall] = []
    pending = [recorded[call_id] for call_id in sorted(in_flight)]
    while True:
        calls = resumed.plan()
        planned += calls
        pending += calls
        if resumed.stop_reason() is not None or not pending:
            break
        resumed.record(oracle(pending.pop(0)))

    assert resumed.stop_reason() == StopReason.SETTLED
    assert not {c.call_id for c in planned} & recorded.keys()
    last_batch = max(c.batch for c in recorded.values())
    assert min(c.batch for c in planned) == last_batch + 1, "batch ids go on after the recorded"
    # The rest of the first wave, under the new rules (tail first): nothing shown is shown again
    # before every candidate has been seen once.
    first_new = [c for c in planned if c.batch == last_batch + 1]
    assert first_new[0].presented and not shown & set(first_new[0].presented)
    assert IDS[-1] in first_new[0].presented
    assert [m for tier in resumed.tiers() for m in tier.members][:5] == IDS[:5]


def test_an_adopted_batch_goes_on_to_the_judges_it_still_wants():
    config = TournamentConfig(batch_size=4, top_k=0, max_in_flight=1, judge_weights=(1, 1, 1))
    tournament = Tournament(IDS[:8], config)
    tournament.adopt([JudgeCall("b0.j0", 0, 0, ("doc2", "doc0", "doc3", "doc1"), 1)])
    tournament.record(oracle(JudgeCall("b0.j0", 0, 0, ("doc2", "doc0", "doc3", "doc1"), 1)))
    (call,) = tournament.plan()
    assert (call.call_id, call.batch, call.judge) == ("b0.j1", 0, 1)
    assert sorted(call.presented) == ["doc0", "doc1", "doc2", "doc3"]


def test_adopted_calls_are_reserved_even_beyond_the_budget():
    config = TournamentConfig(batch_size=4, top_k=0, judge_weights=(1.0,))
    tournament = Tournament(IDS[:8], config)
    calls = [
        JudgeCall("b0.j0", 0, 0, ("doc0", "doc1", "doc2", "doc3"), 1),
        JudgeCall("b1.j0", 1, 0, ("doc4", "doc5", "doc6", "doc7"), 1),
    ]
    tournament.adopt(calls, lambda call: Cost(calls=1, input_tokens=100))
    assert tournament.reserved == Cost(calls=2, input_tokens=200)
    assert tournament.in_flight == {"b0.j0", "b1.j0"}
    assert tournament.plan() == [], "the first wave was wholly shown; both batches are busy"


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (JudgeCall("b0.j0", 0, 0, ("doc0", "doc1"), 1), "already planned"),
        (JudgeCall("b9.j0", 9, 0, ("doc0", "nobody"), 1), "unknown or repeated"),
        (JudgeCall("b9.j0", 9, 0, ("doc0", "doc0"), 1), "unknown or repeated"),
        (JudgeCall("b9.j5", 9, 5, ("doc0", "doc1"), 1), "no judge 5"),
        (JudgeCall("b0.j1", 0, 1, ("doc0", "doc9"), 1), "does not present batch 0"),
    ],
)
def test_adopt_refuses_a_call_this_tournament_could_not_have_planned(call, message):
    tournament = Tournament(IDS[:10], TournamentConfig(batch_size=4, judge_weights=(1.0, 1.0)))
    tournament.adopt([JudgeCall("b0.j0", 0, 0, ("doc0", "doc1"), 1)])
    with pytest.raises(ValueError, match=message):
        tournament.adopt([call])


def test_seeded_noisy_answers_adopted_midway_still_end_in_a_complete_partition():
    rng = random.Random(7)
    original = Tournament(IDS, CONFIG)
    journal = run_for(original, 6)
    resumed = adopted(journal, Tournament(IDS, CONFIG, ReversedFirstWave()))
    pending = [c for kind, calls in journal if kind == "plan" for c in calls]
    pending = [c for c in pending if c.call_id in resumed.in_flight]
    while True:
        pending += resumed.plan()
        if resumed.stop_reason() is not None or not pending:
            break
        call = pending.pop(rng.randrange(len(pending)))
        noisy = sorted(call.presented, key=lambda c: IDS.index(c) + rng.gauss(0, 4))
        resumed.record(Verdict(call.call_id, tuple(noisy), cost=Cost(calls=1)))
    assert resumed.stop_reason() in (StopReason.SETTLED, StopReason.EXHAUSTED)
    assert sorted(m for tier in resumed.tiers() for m in tier.members) == sorted(IDS)
