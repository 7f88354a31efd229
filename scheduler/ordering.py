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
    component_strength = [
        max(strength[member] for member in members) for members in standings.component_members
    ]
    # Per component: candidates known above it that are not placed yet.
    waiting_for = [above.bit_count() for above in standings.above_bits]
    ready = [
        (-component_strength[component], standings.component_members[component][0], component)
        for component, waiting in enumerate(waiting_for)
        if not waiting
    ]
    heapq.heapify(ready)
    order = []
    while ready:
        _, _, component = heapq.heappop(ready)
        order.append(component)
        placed = len(standings.component_members[component])
        below = standings.below_bits[component]
        while below:
            lowest = (below & -below).bit_length() - 1
            follower = standings.component_of[lowest]
            below &= ~standings.component_bits[follower]
            waiting_for[follower] -= placed
            if not waiting_for[follower]:
                entry = (
                    -component_strength[follower],
                    standings.component_members[follower][0],
                    follower,
                )
                heapq.heappush(ready, entry)
    return tuple(order)
