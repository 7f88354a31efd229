"""One batch and the judges asked about it; when an adaptive ensemble asks one more judge."""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import combinations
from typing import TypeVar

from tierank.scheduler.votes import majority

T = TypeVar("T")


@dataclass
class Batch:
    batch_id: int
    # Candidate indices in first-stage order.
    members: tuple[int, ...]
    # How many judges should see it; grows when an adaptive ensemble escalates.
    wanted_judges: int
    asked: list[int] = field(default_factory=list)
    outstanding: int = 0
    # (judge, ordering as candidate indices) of every successful verdict.
    verdicts: list[tuple[int, tuple[int, ...]]] = field(default_factory=list)

    @property
    def bits(self) -> int:
        result = 0
        for member in self.members:
            result |= 1 << member
        return result


def presentation_order(members: Sequence[T], seed: int, batch_id: int, judge: int) -> tuple[T, ...]:
    """The judge's own shuffle of a batch, so position bias does not repeat across judges.

    Seeded from a string: `random.Random` hashes it with SHA-512, stable across processes
    (unlike `hash()`), which crash-recovery replay depends on.
    """
    order = list(members)
    random.Random(f"tierank/{seed}/{batch_id}/{judge}").shuffle(order)
    return tuple(order)


def contested_pairs(verdicts: Sequence[tuple[int, tuple[int, ...]]]) -> set[tuple[int, int]]:
    """Pairs (low, high) that two verdicts of the batch ordered in opposite directions."""
    seen: dict[tuple[int, int], set[bool]] = {}
    for _, ordering in verdicts:
        for winner, loser in combinations(ordering, 2):
            low, high = min(winner, loser), max(winner, loser)
            seen.setdefault((low, high), set()).add(winner == low)
    return {pair for pair, directions in seen.items() if len(directions) == 2}


def wants_another_judge(
    batch: Batch,
    quorum: int,
    weights: Sequence[float],
    contested: set[tuple[int, int]],
    disputed_before: set[tuple[int, int]],
) -> bool:
    """Adaptive ensembles: should this batch, with all its verdicts in, go to one more judge?

    `contested`: the pairs the batch's verdicts disagree on that the target still needs.
    At the quorum, only a pair whose quorum already disagreed in an earlier batch is enough:
    a first disagreement leaves the pair open (no edge), so it rides along in a later regular
    batch, where agreeing judges settle it at no extra call (measured: bench/ranking/RESULTS.md,
    "Why the scheduler's constants are what they are"). With unequal weights the heavier judge
    would otherwise win a disagreement alone. Beyond the quorum,
    another judge is asked only while such a pair is still an exact tie among the batch's
    verdicts.
    """
    if len(batch.asked) <= quorum:
        return bool(contested & disputed_before)
    return any(_batch_majority(batch, weights, *pair) == 0 for pair in contested)


def _batch_majority(batch: Batch, weights: Sequence[float], low: int, high: int) -> int:
    for_low = for_high = 0.0
    for judge, ordering in batch.verdicts:
        if low in ordering and high in ordering:
            if ordering.index(low) < ordering.index(high):
                for_low += weights[judge]
            else:
                for_high += weights[judge]
    return majority(for_low, for_high)
