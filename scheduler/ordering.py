"""The order tiers are listed in: the best estimate the votes allow, within what is known.

Known relations (reachability in the majority graph) are constraints: a tier known to be above
another is listed above it, so a settled tier sits at the one place every such order gives it.
Among tiers whose relation is still open, the one with the greatest strength goes first.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence

from tierank.scheduler.graph import Standings


def tiers_best_first(standings: Standings, strength: Sequence[float]) -> tuple[int, ...]:
    """Components in the order of a linear extension of the known relations that places, at
    each step, the strongest component of those whose every known superior is placed.

    A component's strength is its strongest member's: a tier is listed from that member down.
    Ties go to the first-stage order of the components' first members.
    """
    members_of, bits_of = standings.component_members, standings.component_bits
    component_of, above_bits = standings.component_of, standings.above_bits
    strength_of = strength.__getitem__

    def entry(component: int) -> tuple[float, int, int]:
        members = members_of[component]
        best = strength_of(members[0]) if len(members) == 1 else max(map(strength_of, members))
        return (-best, members[0], component)

    ready = [entry(component) for component, above in enumerate(above_bits) if not above]
    heapq.heapify(ready)
    order = []
    placed = 0
    while ready:
        component = heapq.heappop(ready)[2]
        order.append(component)
        placed |= bits_of[component]
        # A component becomes ready when the last of its superiors is placed, and that one
        # has an edge to it (another superior in between would be placed later), so only
        # direct successors need looking at.
        successors = standings.successor_bits[component]
        while successors:
            follower = component_of[(successors & -successors).bit_length() - 1]
            successors &= ~bits_of[follower]
            if not above_bits[follower] & ~placed:
                heapq.heappush(ready, entry(follower))
    return tuple(order)
