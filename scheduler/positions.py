"""Where pairs of candidates have been shown, and presentations that even it out.

A judge with a position bias (the first-shown candidate ranked first far more often than 1/k,
answers that repeat the shown order) adds its bias to every vote whose pair it saw in one
direction. The per-judge shuffle makes that bias random per call; balancing goes further for
pairs that meet again: the one shown behind last time goes in front, so over the calls that
compare a pair the bias pulls both ways.
"""

from __future__ import annotations

from collections.abc import Sequence


class ShownOrder:
    """Per pair of candidate indices: how often one was shown ahead of the other, net."""

    def __init__(self) -> None:
        # (low, high) -> times low was shown ahead of high, less times high ahead of low.
        self._lead: dict[tuple[int, int], int] = {}

    def record(self, presented: Sequence[int]) -> None:
        """Count one call's presentation (first shown first)."""
        lead = self._lead
        for position, ahead in enumerate(presented):
            for behind in presented[position + 1 :]:
                if ahead < behind:
                    lead[ahead, behind] = lead.get((ahead, behind), 0) + 1
                else:
                    lead[behind, ahead] = lead.get((behind, ahead), 0) - 1

    def lead(self, a: int, b: int) -> int:
        """Times `a` was shown ahead of `b`, less the times `b` was shown ahead of `a`."""
        if a < b:
            return self._lead.get((a, b), 0)
        return -self._lead.get((b, a), 0)

    def balanced(self, order: Sequence[int]) -> tuple[int, ...]:
        """`order` rearranged so that pairs shown before go the other way where possible.

        Repeatedly places next, of the candidates left, the one that has been shown ahead of
        the fewest of the others left; ties keep their place in `order` (the judge's own
        shuffle). Where the batch's net leads form no cycle, a candidate is only placed once it
        leads none of those left, so every pair with a net lead is shown the other way round
        and its imbalance shrinks by one. A batch of pairs never shown together keeps `order`.
        """
        leads = {a: {b for b in order if b != a and self.lead(a, b) > 0} for a in order}
        left = list(order)
        placed: list[int] = []
        while left:
            remaining = set(left)
            chosen = min(left, key=lambda a: len(leads[a] & remaining))
            left.remove(chosen)
            placed.append(chosen)
        return tuple(placed)
