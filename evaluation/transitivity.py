"""How often a judge's pairwise preferences form cycles (a > b, b > c, c > a)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Hashable, Iterable, Mapping
from dataclasses import dataclass
from typing import TypeVar

Item = TypeVar("Item", bound=Hashable)


@dataclass(frozen=True)
class NonTransitivity:
    """``cyclic`` of the ``judged`` triples (all three pairs judged) form a cycle."""

    cyclic: int
    judged: int

    @property
    def rate(self) -> float | None:
        return self.cyclic / self.judged if self.judged else None


def preferences_from_outcomes(
    outcomes: Iterable[tuple[Hashable, Hashable]],
) -> dict[tuple[Hashable, Hashable], int]:
    """Tally (winner, loser) outcomes into votes per ordered pair."""
    tally: dict[tuple[Hashable, Hashable], int] = defaultdict(int)
    for winner, loser in outcomes:
        if winner == loser:
            raise ValueError(f"an item cannot beat itself: {winner!r}")
        tally[(winner, loser)] += 1
    return dict(tally)


def non_transitivity(votes: Mapping[tuple[Item, Item], float]) -> NonTransitivity:
    """Share of judged triples whose majority preferences form a cycle.

    ``votes[(a, b)]`` is how often (or how strongly) a beat b. A pair is judged when it has any
    vote either way; its majority direction decides the edge. A pair whose votes tie is judged
    but has no direction, so a triple containing it is counted but cannot be a cycle.
    """
    neighbours: dict[Item, set[Item]] = defaultdict(set)
    beats: set[tuple[Item, Item]] = set()
    for (a, b), count in votes.items():
        if a == b:
            raise ValueError(f"an item cannot beat itself: {a!r}")
        if count < 0:
            raise ValueError(f"negative vote count for {(a, b)!r}: {count}")
        if count == 0:
            continue
        neighbours[a].add(b)
        neighbours[b].add(a)
        margin = count - votes.get((b, a), 0)
        if margin > 0:
            beats.add((a, b))
    order = {item: i for i, item in enumerate(neighbours)}
    judged = cyclic = 0
    # Each triangle is visited once, from its pair (u, v) with u < v < w in an arbitrary order.
    for u, around_u in neighbours.items():
        for v in around_u:
            if order[v] <= order[u]:
                continue
            for w in around_u & neighbours[v]:
                if order[w] <= order[v]:
                    continue
                judged += 1
                clockwise = (u, v) in beats and (v, w) in beats and (w, u) in beats
                counter = (v, u) in beats and (w, v) in beats and (u, w) in beats
                cyclic += clockwise or counter
    return NonTransitivity(cyclic, judged)
