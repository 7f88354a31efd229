"""Drive tierank's tournament scheduler directly (no server) with a judge session.

Waves: plan every call the scheduler wants now, answer them all in one round (deterministic
order), record every verdict, plan again, until the scheduler gives a stop reason. Every planned
call is answered and charged even if the tiers settle midway through recording a wave: in a real
job those calls are already in flight. The final ranking is the tiers best first, each tier's
members in the order the tier lists them (net wins inside the tier, first-stage order as prior).

With `samples_per_judge` = n, the scheduler's judges n*j .. n*j+n-1 are all the session's judge
j: what a user gets by listing one judge n times under different names. Each copy sees its own
shuffle of a batch and the simulated judge draws fresh noise per call, so the copies' verdicts
are independent samples (permutation self-consistency).
"""

from __future__ import annotations

from tierank.bench.ranking.session import JudgeSession
from tierank.scheduler import Tournament
from tierank.scheduler.types import Cost, JudgeCall, TournamentConfig, Verdict

# Harness guard against a scheduler that neither plans nor stops.
MAX_WAVES = 200


def rank_tournament(
    session: JudgeSession, config: TournamentConfig, samples_per_judge: int = 1
) -> list[str]:
    candidates = session.query.candidates
    tournament = Tournament(list(candidates), config)

    def estimate(call: JudgeCall) -> Cost:
        return Cost(calls=1, input_tokens=session.input_tokens(call.presented))

    for _ in range(MAX_WAVES):
        if tournament.stop_reason() is not None:
            break
        calls = tournament.plan(estimate=estimate)
        if not calls:
            break
        answers = session.ask_round(
            [(call.judge // samples_per_judge, call.presented) for call in calls]
        )
        for call, answer in zip(calls, answers, strict=True):
            tournament.record(
                Verdict(
                    call.call_id,
                    ordering=answer or (),
                    failed=answer is None,
                    cost=Cost(calls=1, input_tokens=session.input_tokens(call.presented)),
                )
            )
    ranking = [
        pid
        for tier in sorted(tournament.tiers(final=True), key=lambda tier: tier.rank)
        for pid in tier.members
    ]
    placed = set(ranking)
    return ranking + [pid for pid in candidates if pid not in placed]
