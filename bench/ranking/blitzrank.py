"""BlitzRank with all pairs ("BlitzRank (all pairs)"): not the published method.

BlitzRank's rounds (ContextualAI, arXiv 2602.05448) rebuilt from its description, but a verdict
counts as all C(k,2) votes instead of the k-1 adjacent edges of the published code (that one is
blitzrank_published.py); stronger and costlier than BlitzRank.

- Every verdict on a batch adds one vote per ordered pair; the majority graph has a -> b when a
  has more votes over b than b over a; its transitive closure says what is known.
- Rounds are strictly sequential, one batch of up to k per round. The first ceil(n/k) rounds
  partition the pool in retrieval order.
- Afterwards each round takes one representative (its best-retrieved member) of every unsettled
  strongly connected component, sorts them by (number known above, number known below,
  retrieval rank), all ascending, and shows the first k in that order.
- A candidate is settled when its relation to every other candidate is known (reachability
  either way, or a shared component). It stops when the current top-m are all settled; the
  current ranking orders components by the number of candidates known above them (a topological
  order of the closure), retrieval rank breaking ties.

Deviation from the original code, on purpose: an unparseable answer is charged and adds no votes
(the original pads it into the identity order, inventing edges). Harness guard: at most
``MAX_ROUNDS_PER_PARTITION`` times the partition's rounds, so a pair that stays tied cannot loop.
"""

from __future__ import annotations

import math

import numpy as np

from tierank.bench.ranking.session import JudgeSession

MAX_ROUNDS_PER_PARTITION = 10


class _Knowledge:
    """Votes, majority graph and its closure over candidates indexed by retrieval rank."""

    def __init__(self, n: int) -> None:
        self.votes = np.zeros((n, n))
        self.refresh()

    def add(self, ordering: list[int]) -> None:
        for i, better in enumerate(ordering):
            self.votes[better, ordering[i + 1 :]] += 1
        self.refresh()

    def refresh(self) -> None:
        reach = self.votes > self.votes.T
        while True:
            wider = reach | ((reach.astype(np.int32) @ reach.astype(np.int32)) > 0)
            if (wider == reach).all():
                break
            reach = wider
        n = len(reach)
        self.same = (reach & reach.T) | np.eye(n, dtype=bool)
        self.above = (reach & ~self.same).sum(axis=0)
        self.below = (reach & ~self.same).sum(axis=1)
        self.settled = self.above + self.below + self.same.sum(axis=1) - 1 == n - 1

    def ranking(self) -> list[int]:
        return sorted(range(len(self.above)), key=lambda i: (self.above[i], i))

    def next_batch(self, k: int) -> list[int]:
        representatives = [
            i for i in range(len(self.above)) if not self.settled[i] and self.same[i, :i].sum() == 0
        ]
        representatives.sort(key=lambda i: (self.above[i], self.below[i], i))
        return representatives[:k]


def rank_blitzrank_all_pairs(session: JudgeSession, k: int = 10, top_m: int = 10) -> list[str]:
    ids = session.query.candidates
    n = len(ids)
    known = _Knowledge(n)
    partition_rounds = math.ceil(n / k)
    for round_index in range(partition_rounds * MAX_ROUNDS_PER_PARTITION):
        if round_index < partition_rounds:
            batch = list(range(round_index * k, min((round_index + 1) * k, n)))
        elif all(known.settled[i] for i in known.ranking()[:top_m]):
            break
        else:
            batch = known.next_batch(k)
        if len(batch) < 2:
            break
        answer = session.ask(tuple(ids[i] for i in batch))
        if answer is not None:
            position = {pid: i for i, pid in enumerate(ids)}
            known.add([position[pid] for pid in answer])
    return [ids[i] for i in known.ranking()]
