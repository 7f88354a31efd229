"""BlitzRank as ContextualAI's published code behaves ("BlitzRank (published)").

Rules followed, as read in github.com/ContextualAI/BlitzRank (MIT), package
``blitzrank/engine/algorithms/tournament_graph/``; written anew here, not copied:

- ``compare_oracle.py`` (``make_edges_from_linear_order``): a judge's ordering of a batch of k
  becomes its k-1 adjacent edges (first -> second, second -> third, ...); every other relation
  comes only from transitivity.
- ``tournament_graph.py`` (``TournamentGraph``, ``enforce_tournament=False`` by default in
  ``types.py``): edges accumulate in one directed graph with no vote counts and no majority; an
  edge seen once stays, and contradicting edges put their ends into one strongly connected
  component. A node's in-reach (out-reach) is the number of other nodes that reach it (that it
  reaches), its component's other members included; its known relations are the other nodes
  related to it either way.
- ``tournament_graph_sort.py`` (``TournamentGraphSort``, ``max_parallel_matches`` = 1, sort
  strategy ``ASCENDING_OUT_REACH``): round 1 shows the first k candidates in retrieval order.
  After each round all candidates are sorted by (in-reach, out-reach), ascending, stably, so
  retrieval order breaks ties (uncompared candidates, (0, 0), therefore come first: the first
  ceil(n/k) rounds partition the pool). The leading run of that order whose members know their
  relation to all n-1 others is finalized; of the rest, the first member met of each component
  is its representative, and the first k representatives are the next batch, in that order.
- Stop: as soon as at least top_m candidates are finalized. The ranking is the sorted order at
  that point (its first top_m are the published result).

Deviations, on purpose: an unparseable answer is charged and adds no edges (the published
listwise comparer pads it into the identity order, inventing edges); the same batch is then
asked again, where the published loop check would raise. The published round cap (50, where it
raises) ends the run here with the order reached so far.
"""

from __future__ import annotations

from itertools import pairwise

import numpy as np

from tierank.bench.ranking.session import JudgeSession

MAX_ROUNDS = 50


def adjacent_edges(ordering: list[int]) -> list[tuple[int, int]]:
    """The (better, worse) pairs a verdict adds: only neighbours in the judge's ordering."""
    return list(pairwise(ordering))


class EdgeGraph:
    """Every edge ever stated, its transitive closure and the published round bookkeeping."""

    def __init__(self, n: int) -> None:
        self.edges = np.zeros((n, n), dtype=bool)
        self.refresh()

    def add(self, edges: list[tuple[int, int]]) -> None:
        for better, worse in edges:
            self.edges[better, worse] = True
        self.refresh()

    def refresh(self) -> None:
        reach = self.edges.copy()
        while True:
            wider = reach | ((reach.astype(np.int32) @ reach.astype(np.int32)) > 0)
            if (wider == reach).all():
                break
            reach = wider
        np.fill_diagonal(reach, False)
        self.reach = reach
        self.in_reach = reach.sum(axis=0)
        self.out_reach = reach.sum(axis=1)
        self.known = (reach | reach.T).sum(axis=1)

    def order(self) -> list[int]:
        return sorted(range(len(self.known)), key=lambda i: (self.in_reach[i], self.out_reach[i]))

    def progress(self, k: int) -> tuple[list[int], list[int]]:
        """(finalized candidates, next batch) as the published scheduler picks them."""
        n = len(self.known)
        finalized: list[int] = []
        representatives: list[int] = []
        for node in self.order():
            if not representatives and self.known[node] >= n - 1:
                finalized.append(node)
            elif not any(self.reach[node, r] and self.reach[r, node] for r in representatives):
                representatives.append(node)
        return finalized, representatives[:k]


def rank_blitzrank_published(session: JudgeSession, k: int = 10, top_m: int = 10) -> list[str]:
    ids = session.query.candidates
    n = len(ids)
    position = {pid: i for i, pid in enumerate(ids)}
    graph = EdgeGraph(n)
    finalized: list[int] = []
    batch = list(range(min(k, n)))
    for _ in range(MAX_ROUNDS):
        if len(finalized) >= min(top_m, n) or len(batch) < 2:
            break
        answer = session.ask(tuple(ids[i] for i in batch))
        if answer is not None:
            graph.add(adjacent_edges([position[pid] for pid in answer]))
        finalized, batch = graph.progress(k)
    return [ids[i] for i in graph.order()]
