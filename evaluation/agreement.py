"""Agreement between two label sets on the same items: confusion matrix and Cohen's κ."""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import Literal, TypeVar

Weighting = Literal["linear", "quadratic"]
# Labels are sorted into categories by default, so they are of one orderable kind.
Label = TypeVar("Label", int, str)


@dataclass(frozen=True)
class ConfusionMatrix:
    """``counts[i][j]``: items labelled ``categories[i]`` by A and ``categories[j]`` by B."""

    categories: tuple[Hashable, ...]
    counts: tuple[tuple[int, ...], ...]

    @property
    def total(self) -> int:
        return sum(map(sum, self.counts))


def confusion_matrix(
    labels_a: Sequence[Label],
    labels_b: Sequence[Label],
    categories: Sequence[Label] | None = None,
) -> ConfusionMatrix:
    """Cross-tabulate paired labels; categories default to the sorted union of both."""
    if len(labels_a) != len(labels_b):
        raise ValueError(f"paired labels differ in length: {len(labels_a)} vs {len(labels_b)}")
    cats = (
        tuple(categories)
        if categories is not None
        else tuple(sorted(set(labels_a) | set(labels_b)))
    )
    index = {c: i for i, c in enumerate(cats)}
    unknown = (set(labels_a) | set(labels_b)) - set(index)
    if unknown:
        raise ValueError(f"labels {sorted(map(str, unknown))} are not among the categories")
    counts = [[0] * len(cats) for _ in cats]
    for a, b in zip(labels_a, labels_b, strict=True):
        counts[index[a]][index[b]] += 1
    return ConfusionMatrix(cats, tuple(map(tuple, counts)))


def cohen_kappa(
    labels_a: Sequence[Label],
    labels_b: Sequence[Label],
    weights: Weighting | None = None,
    categories: Sequence[Label] | None = None,
) -> float | None:
    """Cohen's κ = 1 − observed disagreement / chance disagreement.

    Unweighted, every disagreement costs 1. Weighted κ (ordinal labels) costs a disagreement
    between the i-th and j-th category |i−j| (linear) or (i−j)² (quadratic), by position in
    ``categories`` (default: sorted labels), as scikit-learn does. None when chance
    disagreement is 0 (both raters used one and the same category), where κ is undefined.
    """
    matrix = confusion_matrix(labels_a, labels_b, categories)
    n = matrix.total
    if n == 0:
        return None
    size = len(matrix.categories)
    rows = [sum(row) for row in matrix.counts]
    cols = [sum(matrix.counts[i][j] for i in range(size)) for j in range(size)]

    def cost(i: int, j: int) -> float:
        if weights is None:
            return float(i != j)
        return abs(i - j) if weights == "linear" else (i - j) ** 2

    observed = sum(cost(i, j) * matrix.counts[i][j] for i in range(size) for j in range(size)) / n
    expected = sum(cost(i, j) * rows[i] * cols[j] for i in range(size) for j in range(size)) / n**2
    if expected == 0:
        return None
    return 1 - observed / expected


def binary_kappa(
    grades_a: Sequence[int], grades_b: Sequence[int], threshold: int = 1
) -> float | None:
    """Cohen's κ after binarising both sides: relevant when grade >= ``threshold``."""
    return cohen_kappa(
        [g >= threshold for g in grades_a],
        [g >= threshold for g in grades_b],
        categories=(False, True),
    )
