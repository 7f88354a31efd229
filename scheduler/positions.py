"""Where pairs of candidates have been shown, and presentations that even it out.

A judge with a position bias (the first-shown candidate ranked first far more often than 1/k,
answers that repeat the shown order) adds its bias to every vote whose pair it saw in one
direction. The per-judge shuffle makes that bias random per call; balancing goes further for
pairs that meet again: the one shown behind last time goes in front, so over the calls that
compare a pair the bias pulls both ways.

Balancing decides by where candidates were shown before, never by what judges said of them, so
for a judge that ignores positions the one it ranks first is still shown anywhere alike, and
scheduler/bias.py can test for a preferred first-pick position as for a shuffle (simulated
through tournaments of k = 5 and 10 with honest judges: that z has mean -0.04 and deviation
1.00 over 6,000 judges' jobs).
"""

from __future__ import annotations

from collections.abc import Sequence


class ShownOrder:
    """Per pair of candidate indices: how often one was shown ahead of the other, net."""

    def __init__(self) -> None:
        # (low, high) -> times low was shown ahead of high, less times high ahead of low.
        self._lead: dict[tuple[int, int], int] = {}
        # Per candidate: the candidates it leads (net lead above 0), as a bitset, so that
        # `balanced` counts a batch's leads with a few integer operations.
        self._leads_over: dict[int, int] = {}

    def record(self, presented: Sequence[int]) -> None:
        """Count one call's presentation (first shown first)."""
        lead, leads_over = self._lead, self._leads_over
        for position, ahead in enumerate(presented):
            for behind in presented[position + 1 :]:
                if ahead < behind:
                    net = lead[ahead, behind] = lead.get((ahead, behind), 0) + 1
                else:
                    net = -lead.get((behind, ahead), 0) + 1
                    lead[behind, ahead] = -net
                # `ahead` now leads `behind` by `net`, one more than before.
                if net == 1:
                    leads_over[ahead] = leads_over.get(ahead, 0) | 1 << behind
                elif net == 0:
                    leads_over[behind] &= ~(1 << ahead)

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
        remaining = 0
        for candidate in order:
            remaining |= 1 << candidate
        leads = {a: self._leads_over.get(a, 0) & remaining for a in order}
        if not any(leads.values()):
            return tuple(order)
        left = list(order)
        placed: list[int] = []
        while left:
            chosen = min(left, key=lambda a: (leads[a] & remaining).bit_count())
            left.remove(chosen)
            placed.append(chosen)
            remaining &= ~(1 << chosen)
        return tuple(placed)
