"""Budgets: reservations never overshoot, and running out ends the job with provisional tiers."""

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

IDS = [f"doc{i}" for i in range(40)]


ONE_CALL = Cost(calls=1)


def answered(call: JudgeCall, cost: Cost = ONE_CALL) -> Verdict:
    return Verdict(call.call_id, call.presented, cost=cost)


@settings(max_examples=40, deadline=None)
@given(
    seed=st.integers(0, 2**32),
    max_calls=st.integers(0, 30),
    max_input_tokens=st.integers(0, 20_000),
    max_in_flight=st.integers(1, 6),
)
def test_spent_plus_reserved_never_exceeds_the_budget(
    sim, seed, max_calls, max_input_tokens, max_in_flight
):
    rng = random.Random(seed)
    budget = Budget(max_calls=max_calls, max_input_tokens=max_input_tokens)
    config = TournamentConfig(batch_size=8, top_k=0, max_in_flight=max_in_flight, budget=budget)
    tournament = Tournament(IDS, config)
    estimates: dict[str, Cost] = {}

    def estimate(call: JudgeCall) -> Cost:
        # Deterministic per call: stop_reason() may estimate the same call again.
        return estimates.setdefault(call.call_id, Cost(1, rng.randint(100, 2000)))

    judge = sim.oracle(IDS)
    pending: list[JudgeCall] = []
    while True:
        pending += tournament.plan(estimate)
        assert budget.allows(tournament.spent + tournament.reserved)
        if tournament.stop_reason() is not None:
            break
        assert pending, "nothing in flight, nothing planned, yet no stop reason"
        call = pending.pop(rng.randrange(len(pending)))
        actual = Cost(1, rng.randint(0, estimates[call.call_id].input_tokens))
        tournament.record(Verdict(call.call_id, judge(call).ordering, cost=actual))
        assert budget.allows(tournament.spent + tournament.reserved)

    reason = tournament.stop_reason()
    assert reason in (StopReason.SETTLED, StopReason.BUDGET_EXHAUSTED)
    if reason is StopReason.BUDGET_EXHAUSTED:
        assert not pending
        assert not all(tier.settled for tier in tournament.tiers())


def test_budget_exhaustion_leaves_provisional_tiers(sim):
    config = TournamentConfig(batch_size=10, top_k=0, budget=Budget(max_calls=5))
    tournament = Tournament(IDS, config)
    planned = sim.drive(tournament, sim.oracle(IDS))
    assert len(planned) == 5 and tournament.spent == Cost(calls=5)
    assert tournament.stop_reason() is StopReason.BUDGET_EXHAUSTED
    tiers = tournament.tiers()
    assert sorted(m for tier in tiers for m in tier.members) == sorted(IDS)
    assert not any(tier.settled for tier in tiers)
    assert tournament.settled_count < tournament.total


def test_no_budget_stop_while_calls_are_still_in_flight():
    config = TournamentConfig(batch_size=10, top_k=0, max_in_flight=4, budget=Budget(max_calls=3))
    tournament = Tournament(IDS, config)
    first, second = tournament.plan()
    assert tournament.plan() == []
    assert tournament.stop_reason() is None
    tournament.record(answered(first))
    assert tournament.stop_reason() is None
    tournament.record(answered(second))
    (last,) = tournament.plan()
    assert tournament.stop_reason() is None
    tournament.record(answered(last))
    assert tournament.stop_reason() is StopReason.BUDGET_EXHAUSTED


def test_a_cached_verdict_costs_nothing_and_frees_its_reservation():
    config = TournamentConfig(batch_size=10, top_k=0, max_in_flight=1, budget=Budget(max_calls=1))
    tournament = Tournament(IDS, config)
    (call,) = tournament.plan()
    tournament.record(answered(call, cost=Cost()))
    assert tournament.spent == Cost() and tournament.reserved == Cost()
    assert len(tournament.plan()) == 1


def test_reported_usage_replaces_the_reservation_when_the_answer_lands():
    config = TournamentConfig(
        batch_size=10, top_k=0, max_in_flight=1, budget=Budget(max_input_tokens=1000)
    )
    tournament = Tournament(IDS, config)

    def estimate(_: JudgeCall) -> Cost:
        return Cost(1, 300)

    (call,) = tournament.plan(estimate)
    assert tournament.reserved == Cost(1, 300) and tournament.spent == Cost()
    tournament.record(answered(call, cost=Cost(1, 900)))  # the provider counted more
    assert tournament.reserved == Cost() and tournament.spent == Cost(1, 900)
    assert tournament.plan(estimate) == [], "900 spent + 300 reserved would exceed 1000"
    assert tournament.stop_reason() is StopReason.BUDGET_EXHAUSTED
