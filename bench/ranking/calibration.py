"""Measure how a simulated judge behaves, to calibrate it against real LLM judges.

- cyclic triples: all pairs of the top-20 first-stage candidates are judged once each (k=2, in a
  seeded random presentation order); among triples whose three pairs all got an answer, the share
  that forms a cycle (a > b, b > c, c > a). GPT-4-class judges: 4–8%; weak judges: 21–23%.
- per-call discordance: random batches of k candidates from the top-100; the share of pairs of
  different human grades that a call puts in the wrong order. Larger batches must do worse per
  call (lost in the middle).
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from tierank.bench.ranking.data import Query
from tierank.bench.ranking.judges import QueryWorld, SimulatedJudge
from tierank.server.judges.simulated import JudgeProfile, seeded_rng

CYCLE_POOL = 20
BATCHES_PER_QUERY = 20


@dataclass(frozen=True)
class TripleCount:
    cyclic: int
    complete: int

    @property
    def share(self) -> float:
        return self.cyclic / self.complete if self.complete else 0.0


def cyclic_triples(query: Query, profile: JudgeProfile, seed: int) -> TripleCount:
    judge = SimulatedJudge(profile)
    world = QueryWorld(query, seed)
    rng = seeded_rng(seed, "calibrate-pairs", query.qid, profile.name)
    pool = query.candidates[:CYCLE_POOL]
    beats: dict[tuple[str, str], bool] = {}
    for a, b in itertools.combinations(pool, 2):
        shown = (a, b) if rng.random() < 0.5 else (b, a)
        answer = judge.order(world, shown, rng)
        if answer is not None:
            beats[(a, b)] = answer[0] == a
    cyclic = complete = 0
    for a, b, c in itertools.combinations(pool, 3):
        if (a, b) in beats and (b, c) in beats and (a, c) in beats:
            complete += 1
            # a>b, b>c, c>a or the reverse cycle; combinations keep a < b < c in pool order.
            cyclic += beats[(a, b)] == beats[(b, c)] != beats[(a, c)]
    return TripleCount(cyclic, complete)


def discordance(query: Query, profile: JudgeProfile, k: int, seed: int) -> tuple[int, int]:
    """(misordered, compared) pairs of different grades over random k-batches of one query."""
    judge = SimulatedJudge(profile)
    world = QueryWorld(query, seed)
    rng = seeded_rng(seed, "calibrate-batches", query.qid, profile.name, str(k))
    wrong = compared = 0
    for _ in range(BATCHES_PER_QUERY):
        batch = tuple(rng.choice(query.candidates, size=k, replace=False))
        answer = judge.order(world, batch, rng)
        if answer is None:
            continue
        for better, worse in itertools.combinations(answer, 2):
            gb, gw = query.grade(better), query.grade(worse)
            if gb != gw:
                compared += 1
                wrong += gb < gw
    return wrong, compared


@dataclass(frozen=True)
class Calibration:
    profile: str
    cyclic_share: float
    cyclic_share_by_seed: tuple[float, ...]
    discordance_by_k: dict[int, float]


def calibrate(
    queries: Sequence[Query],
    profile: JudgeProfile,
    seeds: Sequence[int],
    batch_sizes: Sequence[int] = (2, 5, 10, 20),
) -> Calibration:
    by_seed = []
    for seed in seeds:
        counts = [cyclic_triples(q, profile, seed) for q in queries]
        by_seed.append(sum(c.cyclic for c in counts) / sum(c.complete for c in counts))
    by_k = {}
    for k in batch_sizes:
        pairs = np.array([discordance(q, profile, k, s) for q in queries for s in seeds])
        by_k[k] = pairs[:, 0].sum() / pairs[:, 1].sum()
    return Calibration(profile.name, float(np.mean(by_seed)), tuple(by_seed), by_k)
