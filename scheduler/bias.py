"""Whether a judge's answers follow the positions it was shown, measured without labels.

Each judge sees each batch in its own seeded shuffle (scheduler/positions.py may turn pairs
round, by the same rule whatever the candidates are). The shown order is therefore independent
of the documents, and for a judge that ranks by the documents alone the rank correlation
between where a candidate was shown and where the judge ranked it is 0 on average, whatever
the judge's accuracy, and the candidate it ranks first was shown anywhere alike. A judge that
repeats the shown order (or reverses it, or prefers a position for its first pick) drives one
of them away from what chance gives; either statistic below can flag it.

The first statistic, per verdict, is Kendall's tau between shown position and answered rank
over the candidates the verdict ranks: +1 is the shown order repeated, -1 the shown order
reversed. For m candidates ranked independently of their positions, tau has mean 0 and variance
2(2m + 5) / (9m(m - 1)) (exact for a uniformly random order; presentations balanced by
positions.py only lower it). Over a judge's verdicts the taus are combined with inverse-variance
weights w = 1 / variance: a verdict on 7 passages says far more than one on 2. The weighted
mean is sum(w tau) / sum(w), and z = sum(w tau) / sqrt(sum(w)) is then about standard
normal. A judge is flagged when, after at least MIN_VERDICTS verdicts, |z| >= Z_THRESHOLD (a
two-sided false-alarm rate of 0.01% at any one look) and the mean tau is at least MIN_MEAN_TAU
away from 0. The reading is looked at after every verdict, so the rate per look is kept that
low: simulated honest judges are ever flagged in about 0.1% of jobs of 150 verdicts (batches
of 2 to 10; tests/scheduler/test_bias.py). The effect-size floor keeps a long job from flagging
the mild primacy most real models show. A judge that reverses or repeats the shown order of
batches of 5 or more is flagged after MIN_VERDICTS verdicts (the floor keeps a handful of
coarse early readings from deciding); of pairs (k = 2), after 16.

Tau measures agreement with the shown order, not a preferred position: a judge that puts the
last-shown passage first and then repeats the shown order ([5] > [1] > [2] > [3] > [4]) has a
tau of +0.2, and a mix of such answers with others can sit near 0 (a real small model did:
issue 34). The second statistic is where the candidate a verdict ranks first had been shown,
among the m candidates it ranks: u = r / (m - 1) for the r-th of their shown positions (0 the
first shown, 1 the last). For a judge that ignores positions u is uniform on {0, 1/(m-1),
..., 1}: mean 1/2, variance (m + 1) / (12 (m - 1)). It is combined over verdicts as tau is
(inverse-variance weights, z = sum(w (u - 1/2)) / sqrt(sum(w))), and flags under the same
rule: at least MIN_VERDICTS verdicts, |z| >= Z_THRESHOLD, and the mean at least
MIN_FIRST_PICK_SHIFT from 1/2 (a first pick in the last or first quarter on average, not
the mild primacy of a judge that reads the passages). Looking at both after every verdict
keeps honest judges flagged in well under 1% of jobs (tests/scheduler/test_bias.py); a judge
that always ranks the last-shown candidate of 5 first is flagged at its 8th verdict.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

MIN_VERDICTS = 6
Z_THRESHOLD = 3.89
MIN_MEAN_TAU = 0.25
MIN_FIRST_PICK_SHIFT = 0.25


@dataclass(frozen=True)
class PositionBias:
    """One judge's evidence so far."""

    # Verdicts that ranked at least two candidates.
    verdicts: int = 0
    # Mean Kendall tau between shown position and answered rank, each verdict weighted by the
    # inverse of its null variance; +1 follows the shown order.
    mean_tau: float = 0.0
    # The mean's distance from 0 in null standard errors.
    z: float = 0.0
    # Mean relative shown position of each verdict's first-ranked candidate (0 first shown, 1
    # last), weighted alike; 1/2 for a judge that ignores positions.
    first_pick_position: float = 0.5
    # Its distance from 1/2 in null standard errors.
    first_pick_z: float = 0.0

    @property
    def flagged(self) -> bool:
        if self.verdicts < MIN_VERDICTS:
            return False
        follows_order = abs(self.z) >= Z_THRESHOLD and abs(self.mean_tau) >= MIN_MEAN_TAU
        prefers_position = (
            abs(self.first_pick_z) >= Z_THRESHOLD
            and abs(self.first_pick_position - 0.5) >= MIN_FIRST_PICK_SHIFT
        )
        return follows_order or prefers_position


def null_variance(ranked: int) -> float:
    """Variance of Kendall's tau between two independent orders of `ranked` items."""
    return 2 * (2 * ranked + 5) / (9 * ranked * (ranked - 1))


def first_pick_variance(ranked: int) -> float:
    """Variance of the first pick's relative position among `ranked` items, uniform when the
    judge ignores positions."""
    return (ranked + 1) / (12 * (ranked - 1))


def first_pick_position(presented: Sequence[object], ordering: Sequence[object]) -> float:
    """Where the first of `ordering` was shown among its members: 0 first, 1 last."""
    position = {candidate: index for index, candidate in enumerate(presented)}
    first = position[ordering[0]]
    earlier = sum(1 for candidate in ordering[1:] if position[candidate] < first)
    return earlier / (len(ordering) - 1)


def position_tau(presented: Sequence[object], ordering: Sequence[object]) -> float:
    """Kendall's tau between where the members of `ordering` were shown and where they were
    ranked (best first); +1 when the ordering keeps the shown order."""
    position = {candidate: index for index, candidate in enumerate(presented)}
    shown = [position[candidate] for candidate in ordering]
    pairs = len(shown) * (len(shown) - 1) // 2
    concordant = sum(
        1 for i, earlier in enumerate(shown) for later in shown[i + 1 :] if earlier < later
    )
    return (2 * concordant - pairs) / pairs


class PositionBiasMeter:
    """Accumulates one judge's verdicts; a failed or one-item verdict says nothing."""

    def __init__(self) -> None:
        self._verdicts = 0
        self._weighted_tau_sum = 0.0
        self._weight_sum = 0.0
        # The same for the first pick's position, as its distance from 1/2.
        self._weighted_pick_sum = 0.0
        self._pick_weight_sum = 0.0

    def add(self, presented: Sequence[object], ordering: Sequence[object]) -> None:
        if len(ordering) < 2:
            return
        weight = 1 / null_variance(len(ordering))
        self._verdicts += 1
        self._weighted_tau_sum += weight * position_tau(presented, ordering)
        self._weight_sum += weight
        pick_weight = 1 / first_pick_variance(len(ordering))
        self._weighted_pick_sum += pick_weight * (first_pick_position(presented, ordering) - 0.5)
        self._pick_weight_sum += pick_weight

    def reading(self) -> PositionBias:
        if not self._verdicts:
            return PositionBias()
        return PositionBias(
            verdicts=self._verdicts,
            mean_tau=self._weighted_tau_sum / self._weight_sum,
            z=self._weighted_tau_sum / math.sqrt(self._weight_sum),
            first_pick_position=0.5 + self._weighted_pick_sum / self._pick_weight_sum,
            first_pick_z=self._weighted_pick_sum / math.sqrt(self._pick_weight_sum),
        )
