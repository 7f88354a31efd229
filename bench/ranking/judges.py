"""Simulated LLM judges driven by the human grades, and the benchmark's panels of them.

The judge model and its calibrated profiles (strong, weak, position-biased, at chance, the
ensemble's three) are the server's (tierank.server.judges.simulated, which explains the model),
so that a study on the server with `oracle?profile=NAME` judges with the very judge this
benchmark does. Here: the model's world built from a benchmark query, a judge that counts what
it did with the shown order, the perfect judge and the panels.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tierank.bench.ranking.data import Query
from tierank.server.judges.simulated import (
    CHANCE,
    ENSEMBLE,
    STRONG,
    STRONG_POSITION,
    WEAK,
    WEAK_POSITION,
    JudgeProfile,
    JudgeWorld,
    simulated_answer,
)


class QueryWorld(JudgeWorld):
    """The world of one benchmark query: its first-stage candidates and their human grades."""

    def __init__(self, query: Query, seed: int) -> None:
        ids = query.candidates
        super().__init__(
            query.qid,
            ids,
            [query.grade(pid) for pid in ids],
            [len(query.passages[pid]) for pid in ids],
            seed,
        )


@dataclass
class PositionCounts:
    """What a judge did with the order it was shown, over its answers of two or more."""

    answers: int = 0
    # The first-shown candidate ranked first.
    first_shown_first: int = 0
    # The answer is the shown order itself.
    repeated_shown: int = 0


class SimulatedJudge:
    def __init__(self, profile: JudgeProfile) -> None:
        self.profile = profile
        self.positions = PositionCounts()

    @property
    def name(self) -> str:
        return self.profile.name

    def order(
        self, world: JudgeWorld, presented: tuple[str, ...], rng: np.random.Generator
    ) -> tuple[str, ...] | None:
        """The judge's ordering of ``presented`` (best first), or None for an unparseable answer."""
        answer = simulated_answer(self.profile, world, presented, rng)
        if answer is not None and len(presented) >= 2:
            self.positions.answers += 1
            self.positions.first_shown_first += answer[0] == presented[0]
            self.positions.repeated_shown += answer == presented
        return answer


# The perfect judge: the human grades and the fine offsets, nothing else.
ORACLE = JudgeProfile("oracle", noise=0.0, lost_in_middle=0.0, primacy=0.0, failure_rate=0.0)

PANELS: dict[str, tuple[JudgeProfile, ...]] = {
    "oracle": (ORACLE,),
    "strong": (STRONG,),
    "weak": (WEAK,),
    "ensemble": ENSEMBLE,
    "strong-position": (STRONG_POSITION,),
    "weak-position": (WEAK_POSITION,),
    # Two GPT-4-class judges and one at chance, which an adaptive ensemble's quorum includes.
    "chance-ensemble": (ENSEMBLE[0], CHANCE, ENSEMBLE[1]),
}
