"""Simulated judges and a synchronous driver for tournament tests.

Each judge is a function from a JudgeCall to the Verdict it would return; `drive` plays the
server's role (plan, answer calls in some order, record) until the tournament stops.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from types import SimpleNamespace

import pytest

from tierank.scheduler import Cost, JudgeCall, Tournament, Verdict

Judge = Callable[[JudgeCall], Verdict]


def oracle(true_order: Sequence[str]) -> Judge:
    """A transitive judge that knows the hidden true order."""
    rank = {candidate: position for position, candidate in enumerate(true_order)}

    def answer(call: JudgeCall) -> Verdict:
        ordering = tuple(sorted(call.presented, key=rank.__getitem__))
        return Verdict(call.call_id, ordering, cost=Cost(calls=1))

    return answer


def by_judge(judges: Sequence[Judge]) -> Judge:
    """An ensemble: route each call to the simulated judge it was planned for."""
    return lambda call: judges[call.judge](call)


def drive(
    tournament: Tournament,
    judge: Judge,
    *,
    rng: random.Random | None = None,
    after_record: Callable[[Tournament], None] | None = None,
) -> list[JudgeCall]:
    """Run to the end, answering in-flight calls FIFO or in `rng` order; returns planned calls."""
    planned: list[JudgeCall] = []
    pending: list[JudgeCall] = []
    while True:
        new_calls = tournament.plan()
        planned += new_calls
        pending += new_calls
        if tournament.stop_reason() is not None or not pending:
            return planned
        call = pending.pop(rng.randrange(len(pending)) if rng else 0)
        tournament.record(judge(call))
        if after_record:
            after_record(tournament)


def flat(tournament: Tournament) -> list[str]:
    return [member for tier in tournament.tiers() for member in tier.members]


@pytest.fixture(scope="session")
def sim() -> SimpleNamespace:
    return SimpleNamespace(oracle=oracle, by_judge=by_judge, drive=drive, flat=flat)
