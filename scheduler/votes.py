"""Weighted pairwise vote tallies: every ordering a judge states becomes votes, and nothing else."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from itertools import combinations

# Weighted sums of floats may differ in the last bits depending on the order votes arrived;
# margins below this count as a tie so that replaying the same votes cannot flip an edge.
TIE_TOLERANCE = 1e-9


def majority(for_first: float, for_second: float) -> int:
    """+1 when the first side has more weight, -1 when the second has, 0 on a tie."""
    if for_first - for_second > TIE_TOLERANCE:
        return 1
    if for_second - for_first > TIE_TOLERANCE:
        return -1
    return 0


class VoteTally:
    """Votes per ordered pair of candidate indices, plus what each judge stated."""

    def __init__(self, judge_weights: Sequence[float]) -> None:
        self._weights = tuple(judge_weights)
        self._wins: dict[tuple[int, int], float] = {}
        self._stated_by_judge: list[Counter[tuple[int, int]]] = [Counter() for _ in judge_weights]

    def add_ordering(self, judge: int, ordering: Sequence[int]) -> list[tuple[int, int, int]]:
        """Tally C(len, 2) votes for `ordering` (best first).

        Returns the pairs whose majority direction changed, as (low, high, direction) with
        low < high and direction as in `direction`.
        """
        weight = self._weights[judge]
        stated = self._stated_by_judge[judge]
        wins = self._wins
        changed = []
        # Directions are computed from the winner's side (`majority` is antisymmetric, exactly
        # so in floating point), then turned into (low, high) terms: one lookup per side.
        # `majority` is written out inline: this loop runs for every pair of every verdict.
        tolerance = TIE_TOLERANCE
        for winner, loser in combinations(ordering, 2):
            pair = (winner, loser)
            backward = wins.get((loser, winner), 0.0)
            forward = wins.get(pair, 0.0)
            if forward - backward > tolerance:
                before = 1
            else:
                before = -1 if backward - forward > tolerance else 0
            forward += weight
            wins[pair] = forward
            stated[pair] = stated.get(pair, 0) + 1
            if forward - backward > tolerance:
                after = 1
            else:
                after = -1 if backward - forward > tolerance else 0
            if after != before:
                if winner < loser:
                    changed.append((winner, loser, after))
                else:
                    changed.append((loser, winner, -after))
        return changed

    def wins(self, winner: int, loser: int) -> float:
        """Total weight of votes saying `winner` is better than `loser`."""
        return self._wins.get((winner, loser), 0.0)

    def direction(self, a: int, b: int) -> int:
        """+1 if the weighted majority puts a above b, -1 if below, 0 if tied or never stated."""
        return majority(self.wins(a, b), self.wins(b, a))

    def agreement(self, judge: int) -> float | None:
        """Share of `judge`'s stated pairs that the weighted majority now agrees with (ties
        do not agree); None when it stated none."""
        stated = self._stated_by_judge[judge]
        total = sum(stated.values())
        if not total:
            return None
        wins, tolerance = self._wins, TIE_TOLERANCE
        # direction(winner, loser) > 0, written out: it runs for every pair the judge stated.
        agreeing = sum(
            count
            for (winner, loser), count in stated.items()
            if wins.get((winner, loser), 0.0) - wins.get((loser, winner), 0.0) > tolerance
        )
        return agreeing / total
