"""Turn tournament tiers (best first) into graded labels, and calibrate them with few judge calls.

Tiers only say "better than"; graded measures need grades. Two fixed mappings are offered, plus
anchoring, which asks a pointwise judge for the grade of a few tiers and spreads the answers.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

TierPosition = Literal["first", "mean"]


def labels_from_rank_bands(
    tiers: Sequence[Sequence[str]],
    bands: Sequence[tuple[int, int]] = ((10, 3), (30, 2), (100, 1)),
    below: int = 0,
    position: TierPosition = "first",
) -> dict[str, int]:
    """Grade by rank band: ``bands`` are (last position, grade) pairs in increasing position.

    With the default bands, a tier placed within positions 1–10 gets 3, 11–30 gets 2, 31–100
    gets 1, and later ones ``below``. Documents of a tier share one position: by default the
    tier's first position (standard competition ranking, the best rank its members tie for);
    ``position="mean"`` uses the mean of the positions it spans.
    """
    lasts = [last for last, _ in bands]
    if lasts != sorted(lasts) or len(set(lasts)) != len(lasts) or (lasts and lasts[0] < 1):
        raise ValueError(f"band ends must be positive and strictly increasing, got {lasts}")
    labels: dict[str, int] = {}
    start = 1
    for tier in tiers:
        where = start if position == "first" else start + (len(tier) - 1) / 2
        grade = next((g for last, g in bands if where <= last), below)
        labels.update(dict.fromkeys(tier, grade))
        start += len(tier)
    return labels


def labels_from_grade_levels(
    tiers: Sequence[Sequence[str]], levels: int = 4, lowest: int = 0
) -> dict[str, int]:
    """Split the tiers evenly (by tier count) over ``levels`` grades, best tiers highest.

    Tier i of T gets ``lowest + levels − 1 − floor(i · levels / T)``: with 4 levels and 8 tiers,
    tiers 0–1 get 3, 2–3 get 2, 4–5 get 1, 6–7 get 0. With fewer tiers than levels, the top
    grades are used and some lower grades stay empty.
    """
    if levels < 1:
        raise ValueError(f"levels must be at least 1, got {levels}")
    count = len(tiers)
    return {
        docid: lowest + levels - 1 - (i * levels) // count
        for i, tier in enumerate(tiers)
        for docid in tier
    }


@dataclass(frozen=True)
class AnchoredGrades:
    """``grades``: calibrated grade per tier, best first; ``calls``: judge calls made;
    ``anchors``: judged tier -> the judge's raw answer; ``non_monotone``: answers clamped."""

    grades: tuple[int, ...]
    calls: int
    anchors: dict[int, int]
    non_monotone: int


def anchor_tier_grades(num_tiers: int, grade_of: Callable[[int], int]) -> AnchoredGrades:
    """Find where the grade changes along the tier order with a binary search.

    ``grade_of(i)`` asks a pointwise judge for the grade of tier i (the caller picks which
    document represents the tier). Grades are assumed not to increase down the tiers. The
    first and last tiers are judged; an interval whose two end anchors agree is settled, and
    every tier between them inherits that grade without a call; otherwise its middle tier is
    judged and both halves are searched. So a boundary is located exactly with about
    log2(T) calls, and the total is about (number of grade changes + 1) · log2(T).

    An answer that breaks the assumed order (higher than the anchor above it, or lower than the
    one below) is clamped between them so the grades stay monotone; ``non_monotone`` counts
    those answers, a sign that the tiers and the pointwise judge disagree.
    """
    if num_tiers <= 0:
        return AnchoredGrades((), 0, {}, 0)
    anchors: dict[int, int] = {}
    non_monotone = 0

    def judge(index: int, low: int | None, high: int | None) -> int:
        nonlocal non_monotone
        grade = grade_of(index)
        clamped = grade
        if high is not None:
            clamped = min(clamped, high)
        if low is not None:
            clamped = max(clamped, low)
        non_monotone += clamped != grade
        anchors[index] = grade
        return clamped

    grades: list[int | None] = [None] * num_tiers
    last = num_tiers - 1
    grades[0] = judge(0, None, None)
    if last > 0:
        grades[last] = judge(last, None, grades[0])
    pending = [(0, last)] if last > 1 else []
    while pending:
        lo, hi = pending.pop()
        top, bottom = grades[lo], grades[hi]
        if top == bottom:
            for i in range(lo + 1, hi):
                grades[i] = top
            continue
        mid = (lo + hi) // 2
        grades[mid] = judge(mid, bottom, top)
        pending.extend(span for span in ((lo, mid), (mid, hi)) if span[1] - span[0] > 1)
    graded = tuple(grade for grade in grades if grade is not None)
    assert len(graded) == num_tiers, "the bisection grades every tier"
    return AnchoredGrades(graded, len(anchors), anchors, non_monotone)
