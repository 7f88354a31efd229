"""Do two label sets rank systems alike? Kendall's τ-b, Spearman's ρ and rank-biased overlap."""

from __future__ import annotations

import math
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from itertools import combinations


def _check_paired(x: Sequence[float], y: Sequence[float]) -> None:
    if len(x) != len(y):
        raise ValueError(f"paired scores differ in length: {len(x)} vs {len(y)}")


def kendall_tau_b(x: Sequence[float], y: Sequence[float]) -> float | None:
    """τ-b = (C − D) / sqrt((n0 − n1)(n0 − n2)), ties in x (n1) and in y (n2) corrected.

    O(n²), plenty for the tens of systems it is meant for. None when either side is constant.
    """
    _check_paired(x, y)
    concordant = discordant = tied_x = tied_y = pairs = 0
    for i, j in combinations(range(len(x)), 2):
        pairs += 1
        dx = (x[i] > x[j]) - (x[i] < x[j])
        dy = (y[i] > y[j]) - (y[i] < y[j])
        tied_x += dx == 0
        tied_y += dy == 0
        concordant += dx * dy > 0
        discordant += dx * dy < 0
    denominator = math.sqrt((pairs - tied_x) * (pairs - tied_y))
    return (concordant - discordant) / denominator if denominator else None


def _average_ranks(values: Sequence[float]) -> list[float]:
    order = sorted(range(len(values)), key=values.__getitem__)
    ranks = [0.0] * len(values)
    start = 0
    while start < len(order):
        end = start
        while end + 1 < len(order) and values[order[end + 1]] == values[order[start]]:
            end += 1
        for position in range(start, end + 1):
            ranks[order[position]] = (start + end) / 2 + 1
        start = end + 1
    return ranks


def spearman_rho(x: Sequence[float], y: Sequence[float]) -> float | None:
    """Pearson correlation of the average ranks (ties share their mean rank)."""
    _check_paired(x, y)
    rx, ry = _average_ranks(x), _average_ranks(y)
    n = len(rx)
    if n < 2:
        return None
    mx, my = sum(rx) / n, sum(ry) / n
    covariance = sum((a - mx) * (b - my) for a, b in zip(rx, ry, strict=True))
    spread = math.sqrt(sum((a - mx) ** 2 for a in rx) * sum((b - my) ** 2 for b in ry))
    return covariance / spread if spread else None


@dataclass(frozen=True)
class RankBiasedOverlap:
    """RBO of two rankings (Webber, Moffat & Zobel, TOIS 2010).

    ``lower_bound`` (RBO_min) assumes the unseen tails never agree beyond what is already seen;
    ``extrapolated`` (RBO_ext, their eq. 32) assumes the agreement at the last seen depth holds
    forever. ``value`` is the extrapolated form, the point estimate the paper recommends and the
    one reported: two identical rankings have RBO_ext = 1 but RBO_min < 1.
    """

    lower_bound: float
    extrapolated: float

    @property
    def value(self) -> float:
        return self.extrapolated


def rank_biased_overlap(
    ranking_a: Sequence[Hashable], ranking_b: Sequence[Hashable], p: float = 0.9
) -> RankBiasedOverlap:
    """RBO with persistence ``p`` of two rankings (best first, no repeats; lengths may differ)."""
    if not 0 < p < 1:
        raise ValueError(f"persistence p must lie in (0, 1), got {p}")
    for ranking in (ranking_a, ranking_b):
        if len(set(ranking)) != len(ranking):
            raise ValueError("a ranking lists an item twice")
    short, long_ = sorted((ranking_a, ranking_b), key=len)
    s, length = len(short), len(long_)
    if s == 0:
        return RankBiasedOverlap(0.0, 0.0)
    # overlap[d] = X_d: items shared by the two prefixes of depth d (the short one stops at s).
    overlap = [0] * (length + 1)
    seen_short: set[Hashable] = set()
    seen_long: set[Hashable] = set()
    shared = 0
    for d in range(1, length + 1):
        if d <= s:
            item = short[d - 1]
            shared += item in seen_long
            seen_short.add(item)
        item = long_[d - 1]
        shared += item in seen_short
        seen_long.add(item)
        overlap[d] = shared
    x_s, x_l = overlap[s], overlap[length]
    seen = sum(overlap[d] / d * p**d for d in range(1, length + 1))
    # Sum over d > l of p^d / d = -ln(1 - p) - sum over d <= l of p^d / d.
    tail = -math.log(1 - p) - sum(p**d / d for d in range(1, length + 1))
    lower_bound = (1 - p) / p * (seen + x_l * tail)
    unseen_short = sum(x_s * (d - s) / (s * d) * p**d for d in range(s + 1, length + 1))
    extrapolated = (1 - p) / p * (seen + unseen_short) + (
        (x_l - x_s) / length + x_s / s
    ) * p**length
    return RankBiasedOverlap(lower_bound, extrapolated)
