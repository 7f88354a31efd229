"""Position-bias detection without labels (issue 22 item 15): honest judges, however noisy,
are rarely flagged over a whole job; judges that follow the shown positions are flagged within
a few verdicts, and their votes alone never settle a job."""

from __future__ import annotations

import random
from collections.abc import Callable
from types import SimpleNamespace

import pytest

from tierank.scheduler import Cost, JudgeCall, StopReason, Tournament, TournamentConfig, Verdict
from tierank.scheduler.bias import (
    MIN_MEAN_TAU,
    MIN_VERDICTS,
    PositionBiasMeter,
    first_pick_position,
    position_tau,
)

IDS = [f"doc{i:02d}" for i in range(40)]


def test_tau_is_plus_one_for_the_shown_order_and_minus_one_for_its_reverse() -> None:
    assert position_tau("abcd", "abcd") == 1.0
    assert position_tau("abcd", "dcba") == -1.0
    assert position_tau("abcd", "bd") == 1.0  # a partial ranking, in shown order
    assert position_tau("abcd", "badc") == pytest.approx(1 / 3)


def test_the_first_pick_is_placed_among_the_shown_positions_of_what_is_ranked() -> None:
    assert first_pick_position("abcde", "eabcd") == 1.0
    assert first_pick_position("abcde", "abcde") == 0.0
    assert first_pick_position("abcde", "cbade") == 0.5
    assert first_pick_position("abcd", "db") == 1.0  # a partial ranking: among its members
    assert first_pick_position("abcd", "bd") == 0.0


def honest(noise: float, salt: str) -> Callable[[JudgeCall], Verdict]:
    """Ranks by the true order (IDS) plus noise seeded by the call, whatever it is shown; with
    large noise, nearly at random."""

    def answer(call: JudgeCall) -> Verdict:
        def utility(candidate: str) -> float:
            jitter = random.Random(f"{salt}/{call.call_id}/{candidate}").gauss(0, noise)
            return IDS.index(candidate) + jitter

        return Verdict(call.call_id, tuple(sorted(call.presented, key=utility)), cost=Cost(1))

    return answer


def reverses_shown(call: JudgeCall) -> Verdict:
    """The real model of issue 22: the shown order reversed."""
    return Verdict(call.call_id, tuple(reversed(call.presented)), cost=Cost(1))


def last_shown_first(call: JudgeCall) -> Verdict:
    """The last-shown candidate first, the rest in the true order: a milder bias."""
    rest = sorted(call.presented[:-1], key=IDS.index)
    return Verdict(call.call_id, (call.presented[-1], *rest), cost=Cost(1))


def last_shown_then_shown_order(call: JudgeCall) -> Verdict:
    """The last-shown candidate first, then the shown order (issue 34 item 23): a tau of only
    +0.2 at k = 5, yet the first pick is always the last shown."""
    shown = call.presented
    return Verdict(call.call_id, (shown[-1], *shown[:-1]), cost=Cost(1))


def test_honest_judges_are_rarely_flagged_even_checked_after_every_verdict() -> None:
    """2,000 simulated honest judges of 80 verdicts each, uniform shuffles of 2 to 10 passages,
    checked after every verdict: the share ever flagged bounds the false-alarm rate per job."""
    rng = random.Random(22)
    ever_flagged = 0
    for _ in range(2000):
        meter = PositionBiasMeter()
        flagged = False
        for _ in range(80):
            shown = list(range(rng.randint(2, 10)))
            rng.shuffle(shown)
            # The judge's answer depends on the passages only: a random order of them.
            answer = sorted(shown)
            if rng.random() < 0.3:
                answer = answer[: rng.randint(2, len(answer))]  # partial answers too
            meter.add(shown, answer)
            flagged = flagged or meter.reading().flagged
        ever_flagged += flagged
    assert ever_flagged <= 6, ever_flagged  # at most 0.3%


@pytest.mark.parametrize("seed", range(12))
def test_honest_noisy_judges_in_a_tournament_are_never_flagged(
    seed: int, sim: SimpleNamespace
) -> None:
    """Through the tournament's own presentations (seeded shuffles, balanced positions)."""
    config = TournamentConfig(
        batch_size=5, top_k=0, max_in_flight=4, judge_weights=(1.0, 1.0, 1.0), seed=seed
    )
    tournament = Tournament(IDS, config)
    judges = [honest(0.5, f"{seed}a"), honest(5, f"{seed}b"), honest(40, f"{seed}c")]
    flags: list[list[bool]] = []
    sim.drive(
        tournament,
        sim.by_judge(judges),
        after_record=lambda t: flags.append([b.flagged for b in t.position_bias()]),
    )
    assert not any(any(row) for row in flags)
    assert min(b.verdicts for b in tournament.position_bias()) > MIN_VERDICTS
    assert tournament.stop_reason() == StopReason.SETTLED


@pytest.mark.parametrize(
    ("follower", "within"),
    [(reverses_shown, MIN_VERDICTS), (last_shown_first, 8), (last_shown_then_shown_order, 8)],
)
def test_a_judge_following_positions_is_flagged_within_a_few_verdicts(
    follower: Callable[[JudgeCall], Verdict], within: int, sim: SimpleNamespace
) -> None:
    tournament = Tournament(IDS, TournamentConfig(batch_size=5, top_k=0, max_in_flight=4))
    first_flag: list[int] = []

    def note(t: Tournament) -> None:
        (bias,) = t.position_bias()
        if bias.flagged and not first_flag:
            first_flag.append(bias.verdicts)

    sim.drive(tournament, follower, after_record=note)
    assert first_flag and first_flag[0] <= within, first_flag


def test_votes_of_a_flagged_judge_alone_never_settle_a_job(sim: SimpleNamespace) -> None:
    tournament = Tournament(IDS, TournamentConfig(batch_size=5, top_k=10, max_in_flight=4))
    sim.drive(tournament, reverses_shown)

    assert tournament.stop_reason() == StopReason.POSITION_BIASED
    (bias,) = tournament.position_bias()
    assert bias.flagged and bias.mean_tau == -1.0
    assert not any(tier.settled for tier in tournament.tiers(final=True))
    assert tournament.settled_count == 0


def test_a_flagged_judge_beside_an_honest_one_leaves_the_job_settled(
    sim: SimpleNamespace,
) -> None:
    config = TournamentConfig(batch_size=5, top_k=10, max_in_flight=4, judge_weights=(1.0, 1.0))
    tournament = Tournament(IDS, config)
    sim.drive(tournament, sim.by_judge([sim.oracle(IDS), reverses_shown]))

    assert tournament.stop_reason() == StopReason.SETTLED
    honest_bias, follower_bias = tournament.position_bias()
    assert follower_bias.flagged and not honest_bias.flagged
    assert any(tier.settled for tier in tournament.tiers(final=True))


def test_a_preferred_position_is_caught_where_tau_sees_little(sim: SimpleNamespace) -> None:
    tournament = Tournament(IDS, TournamentConfig(batch_size=5, top_k=0, max_in_flight=4))
    sim.drive(tournament, last_shown_then_shown_order)

    (bias,) = tournament.position_bias()
    assert bias.flagged and bias.first_pick_position == 1.0 and bias.first_pick_z > 3.89
    assert 0 < bias.mean_tau < MIN_MEAN_TAU  # on tau alone it would never be flagged
    assert tournament.stop_reason() == StopReason.POSITION_BIASED
