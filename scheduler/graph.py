"""The majority graph, its strongly connected components and what reachability says about them.

Candidates are indices 0..n-1; sets of candidates are Python ints used as bitsets (bit i is
candidate i), which keeps the closure of a 1000-node graph in a few thousand integer operations.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cached_property

# igraph imports matplotlib.pyplot whenever matplotlib is installed (the bench extra installs it),
# for plots the scheduler never draws: about a third of a second of start-up for every server
# process and admin tool. A None in sys.modules makes that import fail, which igraph takes as
# "not installed"; matplotlib itself stays importable afterwards.
if "matplotlib" in sys.modules:
    import igraph
else:
    sys.modules["matplotlib"] = None  # type: ignore[assignment]
    try:
        import igraph
    finally:
        del sys.modules["matplotlib"]


def bits_of(indices: Iterable[int]) -> int:
    result = 0
    for index in indices:
        result |= 1 << index
    return result


@dataclass(frozen=True)
class Standings:
    """What the majority graph says at one moment: components and who is known above whom."""

    size: int
    # Component of each candidate; components are numbered in no particular order.
    component_of: tuple[int, ...]
    # Members of each component, as bitsets and as sorted index lists.
    component_bits: tuple[int, ...]
    component_members: tuple[tuple[int, ...], ...]
    # Candidates strictly above / below each component (reachable in the graph, outside it).
    above_bits: tuple[int, ...]
    below_bits: tuple[int, ...]
    # Candidates outside each component that one of its members has an edge to: its direct
    # successors, the only components whose last superior it can be (ordering.py uses this).
    successor_bits: tuple[int, ...]

    @cached_property
    def above_count(self) -> tuple[int, ...]:
        per_component = [bits.bit_count() for bits in self.above_bits]
        return tuple(per_component[c] for c in self.component_of)

    @cached_property
    def below_count(self) -> tuple[int, ...]:
        per_component = [bits.bit_count() for bits in self.below_bits]
        return tuple(per_component[c] for c in self.component_of)

    @cached_property
    def unknown_bits(self) -> tuple[int, ...]:
        """Per component: candidates whose relation to it the graph does not determine."""
        everyone = (1 << self.size) - 1
        return tuple(
            everyone & ~(above | below | members)
            for above, below, members in zip(
                self.above_bits, self.below_bits, self.component_bits, strict=True
            )
        )

    @cached_property
    def components_best_first(self) -> tuple[int, ...]:
        """Components in a topological order of the condensation, ties by first-stage order.

        Sorting by the number of candidates known above is topological: along an edge a->b,
        b has everything above a, plus a's component, above it.
        """
        keys = [
            (above.bit_count(), -below.bit_count(), members[0])
            for above, below, members in zip(
                self.above_bits, self.below_bits, self.component_members, strict=True
            )
        ]
        return tuple(sorted(range(len(keys)), key=keys.__getitem__))


class MajorityGraph:
    """Edge a->b iff the weighted votes for a over b exceed those for b over a."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._successors = [0] * size
        self._predecessors = [0] * size
        # A mirror of the edges for igraph's strongly connected components (C speed).
        self._graph = igraph.Graph(n=size, directed=True)

    def apply(self, changes: list[tuple[int, int, int]]) -> None:
        """Apply majority changes (low, high, direction) from `VoteTally.add_ordering`."""
        removed, added = [], []
        for low, high, direction in changes:
            for source, target in ((low, high), (high, low)):
                if self._successors[source] >> target & 1:
                    self._successors[source] &= ~(1 << target)
                    self._predecessors[target] &= ~(1 << source)
                    removed.append((source, target))
            if direction:
                source, target = (low, high) if direction > 0 else (high, low)
                self._successors[source] |= 1 << target
                self._predecessors[target] |= 1 << source
                added.append((source, target))
        if removed:
            self._graph.delete_edges(self._graph.get_eids(removed))
        if added:
            self._graph.add_edges(added)

    def has_edge(self, source: int, target: int) -> bool:
        return bool(self._successors[source] >> target & 1)

    def net_wins(self, candidate: int, among: int) -> int:
        """Edges from `candidate` minus edges into it, counting only neighbours in `among`."""
        return (self._successors[candidate] & among).bit_count() - (
            self._predecessors[candidate] & among
        ).bit_count()

    def standings(self) -> Standings:
        component_of = self._graph.connected_components(mode="strong").membership
        count = max(component_of, default=-1) + 1
        members: list[list[int]] = [[] for _ in range(count)]
        for candidate, component in enumerate(component_of):
            members[component].append(candidate)
        component_bits = [bits_of(group) for group in members]
        # igraph (1.0) happens to number components in a topological order, sources first;
        # visiting sinks first for successors (sources first for predecessors) means every
        # neighbour is already done, so the depth-first search below never descends.
        below = _strict_reach(
            self._successors, component_of, component_bits, range(count - 1, -1, -1)
        )
        above = _strict_reach(self._predecessors, component_of, component_bits, range(count))
        return Standings(
            size=self.size,
            component_of=tuple(component_of),
            component_bits=tuple(component_bits),
            component_members=tuple(tuple(group) for group in members),
            above_bits=tuple(above),
            below_bits=tuple(below),
            successor_bits=tuple(_direct_reach(self._successors, component_of, component_bits)),
        )


def _direct_reach(
    neighbours: list[int], component_of: list[int], component_bits: list[int]
) -> list[int]:
    """For each component, the candidates outside it that one of its members has an edge to."""
    direct = [0] * len(component_bits)
    for candidate, component in enumerate(component_of):
        direct[component] |= neighbours[candidate]
    return [reach & ~members for reach, members in zip(direct, component_bits, strict=True)]


def _strict_reach(
    neighbours: list[int],
    component_of: list[int],
    component_bits: list[int],
    visit_order: range,
) -> list[int]:
    """For each component, every candidate reachable from it along `neighbours`, minus itself.

    Depth-first over the condensation (a DAG), correct in any `visit_order` and fastest when
    neighbours come first, so no topological sort is needed. A component's
    reach is the union of its neighbours' reaches; a neighbour already inside the union adds
    nothing, so only about ln(out-degree) neighbours per component cost an operation.
    """
    count = len(component_bits)
    # Per component: neighbours outside it still to absorb, and the reach absorbed so far.
    pending = _direct_reach(neighbours, component_of, component_bits)
    partial = [0] * count
    # Reach including the component's own members; None until computed.
    closed: list[int | None] = [None] * count
    for root in visit_order:
        if closed[root] is not None:
            continue
        stack = [root]
        while stack:
            component = stack[-1]
            remaining, reach = pending[component], partial[component]
            while remaining:
                lowest = remaining & -remaining
                neighbour = component_of[lowest.bit_length() - 1]
                neighbour_reach = closed[neighbour]
                if neighbour_reach is None:
                    pending[component], partial[component] = remaining, reach
                    stack.append(neighbour)
                    break
                reach |= neighbour_reach
                remaining &= ~neighbour_reach
            else:
                closed[component] = reach | component_bits[component]
                stack.pop()
    reaches = [reach for reach in closed if reach is not None]
    assert len(reaches) == count, "every component is closed above"
    return [reach & ~bits for reach, bits in zip(reaches, component_bits, strict=True)]
