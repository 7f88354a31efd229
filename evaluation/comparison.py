"""Compare systems over queries: bootstrap intervals of means and paired randomization tests.

Every function takes one value per query (None where the measure is NA) and is reproducible:
the same input and ``seed`` give the same result. The bootstrap is the percentile bootstrap of
the mean over queries; the paired test is the two-sided sign-flip randomization test of the mean
paired difference, with the +1 correction, p = (hits + 1) / (samples + 1), so a p-value is
never 0 (Smucker, Allan & Carterette, CIKM 2007, recommend this test for IR).

:func:`compare_systems` draws ONE set of resampled query indices for all systems and pairs
(a paired design), and one set of sign flips for all pairs; where every system has a value for
every query its intervals and tests equal, up to rounding, those of :func:`bootstrap_interval`
and :func:`paired_test` given the values in query id order and the same seed. Resamples are
drawn in chunks of about two million query draws, so memory stays under about 100 MB whatever
the number of queries and samples.

numpy is imported by the functions that compute, not with the module: every `tierank` command
and server process imports this package, most never compare systems, and numpy's import is
about a tenth of a second of their start-up.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from itertools import pairwise
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

    FloatArray = npt.NDArray[np.float64]

# Query draws per chunk (rows x queries): about 16 MB of indices and 16 MB of counts at a time.
_DRAWS_PER_CHUNK = 2_000_000


@dataclass(frozen=True)
class Interval:
    """A mean over queries and its bootstrap interval; all None when no query has a value."""

    mean: float | None
    low: float | None
    high: float | None


@dataclass(frozen=True)
class PairedTest:
    """Mean paired difference a − b over the ``count`` queries where both have a value, its
    bootstrap interval and the randomization test's two-sided p-value (None when count is 0)."""

    difference: float | None
    low: float | None
    high: float | None
    p_value: float | None
    count: int


@dataclass(frozen=True)
class PairComparison:
    """Two systems of a ranking, ``better`` ranked above ``worse``: ``test`` is of ``better``
    − ``worse``; ``p_adjusted`` is its p-value after Holm's correction for every pair of the
    ranking being tested (None with the p-value); ``distinguishable`` when it is below alpha."""

    better: str
    worse: str
    test: PairedTest
    p_adjusted: float | None
    distinguishable: bool


@dataclass(frozen=True)
class SystemComparison:
    """Each system's interval, the ranking (best first), the tests of every pair of it
    (``pairs``: each system against every one ranked below it, in ranking order) and, among
    them, those of neighbours (``adjacent``)."""

    intervals: dict[str, Interval]
    ranking: list[str]
    pairs: list[PairComparison]
    adjacent: list[PairComparison]


def bootstrap_interval(
    values: Sequence[float | None],
    confidence: float = 0.95,
    samples: int = 10_000,
    seed: int = 0,
) -> Interval:
    """Mean of the values (None left out) and its percentile bootstrap interval.

    No value: all None. One value: low = high = mean.
    """
    import numpy as np

    _check_settings(confidence, samples)
    present = _as_array([v for v in values if v is not None])
    [interval] = _bootstrap_intervals(present[np.newaxis, :], confidence, samples, seed)
    return interval


def paired_test(
    a: Sequence[float | None],
    b: Sequence[float | None],
    confidence: float = 0.95,
    samples: int = 10_000,
    seed: int = 0,
) -> PairedTest:
    """Paired comparison of a and b (one value each per query, aligned).

    Queries where either is None are left out. ``difference`` is the mean of a − b, with its
    percentile bootstrap interval; ``p_value`` is the two-sided sign-flip randomization test's:
    under the null hypothesis each query's difference is as likely to have had the other sign.
    """
    import numpy as np

    _check_settings(confidence, samples)
    if len(a) != len(b):
        raise ValueError(f"paired values differ in length: {len(a)} vs {len(b)}")
    differences = _as_array(
        [x - y for x, y in zip(a, b, strict=True) if x is not None and y is not None]
    )
    rows = differences[np.newaxis, :]
    [interval] = _bootstrap_intervals(rows, confidence, samples, seed)
    [p_value] = _sign_flip_p_values(rows, samples, seed)
    return _paired_test(interval, p_value, differences.size)


def compare_systems(
    per_query: Mapping[str, Mapping[str, float | None]],
    *,
    confidence: float = 0.95,
    alpha: float = 0.05,
    samples: int = 10_000,
    seed: int = 0,
) -> SystemComparison:
    """Intervals, ranking and paired tests of every pair of systems on one measure.

    ``per_query`` is system -> query id -> value (None or absent: NA). The queries resampled are
    those where at least one system has a value; a system's resampled mean is over the drawn
    queries where it has a value. The ranking is by mean, best first, equal means by name, and
    systems without any value last (by name). Each pair is compared on the queries where both
    have a value; its p-value is corrected for the number of pairs by Holm's step-down method
    (ranx and trec_tools do the same for all-pairs tables), which holds the chance of calling
    any equal pair different at alpha. ``adjacent[i]`` compares ``ranking[i]`` with
    ``ranking[i + 1]``.
    """
    import numpy as np

    _check_settings(confidence, samples)
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must lie in (0, 1), got {alpha}")
    systems, matrix = _system_matrix(per_query)
    means = {system: _mean(row) for system, row in zip(systems, matrix, strict=True)}
    ranking = rank_by_mean(means)
    row_of = {system: i for i, system in enumerate(systems)}
    pairs = [(better, worse) for i, better in enumerate(ranking) for worse in ranking[i + 1 :]]
    differences = np.array(
        [matrix[row_of[better]] - matrix[row_of[worse]] for better, worse in pairs]
    ).reshape(len(pairs), matrix.shape[1])
    system_rows, pair_rows = _paired_intervals(matrix, pairs, row_of, confidence, samples, seed)
    p_values = _sign_flip_p_values(differences, _pair_flips(samples, differences.shape), seed)
    adjusted = holm_adjusted(p_values)
    compared = []
    for (better, worse), interval, p_value, p_holm, difference in zip(
        pairs, pair_rows, p_values, adjusted, differences, strict=True
    ):
        test = _paired_test(interval, p_value, int(np.count_nonzero(~np.isnan(difference))))
        distinguishable = p_holm is not None and p_holm < alpha
        compared.append(PairComparison(better, worse, test, p_holm, distinguishable))
    neighbours = set(pairwise(ranking))
    return SystemComparison(
        dict(zip(systems, system_rows, strict=True)),
        ranking,
        compared,
        [pair for pair in compared if (pair.better, pair.worse) in neighbours],
    )


def holm_adjusted(p_values: Sequence[float | None]) -> list[float | None]:
    """Holm's step-down adjustment of a family of p-values (None: no test, left out of the
    family): the i-th smallest of m is multiplied by m − i + 1, made non-decreasing, capped
    at 1."""
    tested = sorted((p, i) for i, p in enumerate(p_values) if p is not None)
    adjusted: list[float | None] = [None] * len(p_values)
    running = 0.0
    for rank, (p_value, index) in enumerate(tested):
        running = max(running, min(1.0, (len(tested) - rank) * p_value))
        adjusted[index] = running
    return adjusted


def system_intervals(
    per_query: Mapping[str, Mapping[str, float | None]],
    *,
    confidence: float = 0.95,
    samples: int = 10_000,
    seed: int = 0,
) -> dict[str, Interval]:
    """``compare_systems(...).intervals`` without the ranking and tests (the same numbers)."""
    _check_settings(confidence, samples)
    systems, matrix = _system_matrix(per_query)
    intervals = _bootstrap_intervals(matrix, confidence, samples, seed)
    return dict(zip(systems, intervals, strict=True))


def mean_over_queries(values: Sequence[float | None]) -> float | None:
    """The mean of the values (None left out; None if none is left) that intervals report:
    the mean of equal values is exactly that value."""
    return _mean(_as_array([v for v in values if v is not None]))


def rank_by_mean(means: Mapping[str, float | None]) -> list[str]:
    """System names best first: mean descending, equal means by name, None last (by name)."""
    return sorted(means, key=lambda name: (means[name] is None, -(means[name] or 0.0), name))


def _check_settings(confidence: float, samples: int) -> None:
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must lie in (0, 1), got {confidence}")
    if samples < 1:
        raise ValueError(f"samples must be at least 1, got {samples}")


def _as_array(values: Sequence[float]) -> FloatArray:
    import numpy as np

    array = np.asarray(values, dtype=np.float64)
    if not np.all(np.isfinite(array)):
        raise ValueError("values must be finite numbers (None for NA)")
    return array


def _system_matrix(
    per_query: Mapping[str, Mapping[str, float | None]],
) -> tuple[list[str], FloatArray]:
    """Systems (sorted) and their values (NaN for NA), one column per query any has a value for."""
    import numpy as np

    systems = sorted(per_query)
    qids = sorted(
        {qid for values in per_query.values() for qid, v in values.items() if v is not None}
    )
    matrix = np.full((len(systems), len(qids)), np.nan)
    for row, system in enumerate(systems):
        values = per_query[system]
        present = [(col, v) for col, qid in enumerate(qids) if (v := values.get(qid)) is not None]
        if present:
            columns, numbers = zip(*present, strict=True)
            matrix[row, list(columns)] = _as_array(numbers)
    return systems, matrix


def _mean(row: FloatArray) -> float | None:
    import numpy as np

    present = row[~np.isnan(row)]
    if not present.size:
        return None
    # A correctly rounded sum divided by the count can still miss by a rounding; one correction
    # step makes the mean of equal values exactly that value, so that an interval made of the
    # mean plus resampled deviations from it contains it.
    first = math.fsum(present.tolist()) / present.size
    return first + math.fsum((present - first).tolist()) / present.size


def _generators(seed: int) -> tuple[np.random.Generator, np.random.Generator]:
    """Independent streams for bootstrap draws and sign flips, so that each is the same whether
    or not the other is drawn (an interval alone equals the one beside a test)."""
    import numpy as np

    bootstrap, signs = np.random.SeedSequence(seed).spawn(2)
    return np.random.default_rng(bootstrap), np.random.default_rng(signs)


def _chunks(samples: int, queries: int) -> list[int]:
    size = max(1, _DRAWS_PER_CHUNK // max(queries, 1))
    return [min(size, samples - start) for start in range(0, samples, size)]


def _bootstrap_intervals(
    rows: FloatArray, confidence: float, samples: int, seed: int
) -> list[Interval]:
    """Percentile bootstrap interval of each row's mean (NaN = NA), all rows resampled alike."""
    means, resampled = _resampled_means(rows, samples, seed)
    return [
        _percentile(m, r, row, confidence) for m, r, row in zip(means, resampled, rows, strict=True)
    ]


def _resampled_means(rows: FloatArray, samples: int, seed: int) -> tuple[FloatArray, FloatArray]:
    """Each row's mean (NaN = NA) and its mean in each of `samples` resamples of the queries
    (rows x samples; NaN where a resample drew none of the row's queries).

    A resample draws query indices with replacement; as counts per query (a matrix of
    resamples x queries), every row's resampled sum is one matrix product. Values are centred on
    their mean first, so a row of equal values gets exactly that value back, never a rounding
    error beside it.
    """
    import numpy as np

    queries = rows.shape[1]
    means = np.array([math.nan if m is None else m for m in map(_mean, rows)])
    if queries == 0:
        return means, np.full((len(rows), samples), np.nan)
    present = ~np.isnan(rows)
    centred = np.where(present, rows - means[:, np.newaxis], 0.0)
    weights = present.astype(np.float64)
    draws, _ = _generators(seed)
    resampled = []
    for size in _chunks(samples, queries):
        counts = _counts(draws.integers(0, queries, size=(size, queries)), queries)
        # A resample that drew none of a row's queries has no mean for it (0 / 0 = NaN).
        with np.errstate(invalid="ignore"):
            resampled.append(means + (counts @ centred.T) / (counts @ weights.T))
    return means, np.concatenate(resampled).T


def _percentile(mean: float, resampled: FloatArray, row: FloatArray, confidence: float) -> Interval:
    """The percentile interval of a row's resampled means (`row`: its values, NaN = NA)."""
    import numpy as np

    count = int((~np.isnan(row)).sum())
    if count == 0:
        return Interval(None, None, None)
    if count == 1:
        return Interval(float(mean), float(mean), float(mean))
    tail = (1 - confidence) / 2
    low, high = np.quantile(resampled[~np.isnan(resampled)], [tail, 1 - tail])
    # A resampled mean is the mean plus summed deviations, which can round a hair past it (as
    # for a resample that drew each query once); a bound that did is the mean.
    low, high = min(low, mean), max(high, mean)
    return Interval(float(mean), float(low), float(high))


def _paired_intervals(
    matrix: FloatArray,
    pairs: Sequence[tuple[str, str]],
    row_of: Mapping[str, int],
    confidence: float,
    samples: int,
    seed: int,
) -> tuple[list[Interval], list[Interval]]:
    """Bootstrap intervals of each system's mean and each pair's mean difference, every one
    from the same resampled queries. A pair whose two systems have values on the same queries
    (the usual case) takes its resampled differences from the systems' resampled means, so that
    all pairs of 64 systems cost no more resampling than the systems themselves; the others are
    resampled as rows of their own."""
    import numpy as np

    present = ~np.isnan(matrix)
    derived = [
        i
        for i, (a, b) in enumerate(pairs)
        if np.array_equal(present[row_of[a]], present[row_of[b]])
    ]
    own = [i for i in range(len(pairs)) if i not in set(derived)]
    rows = (
        np.concatenate(
            [
                matrix,
                np.array([matrix[row_of[pairs[i][0]]] - matrix[row_of[pairs[i][1]]] for i in own]),
            ]
        )
        if own
        else matrix
    )
    means, resampled = _resampled_means(rows, samples, seed)
    intervals = [
        _percentile(m, r, p, confidence) for m, r, p in zip(means, resampled, rows, strict=True)
    ]
    pair_intervals: list[Interval] = [Interval(None, None, None)] * len(pairs)
    for offset, i in enumerate(own):
        pair_intervals[i] = intervals[len(matrix) + offset]
    for i in derived:
        a, b = row_of[pairs[i][0]], row_of[pairs[i][1]]
        difference = matrix[a] - matrix[b]
        mean = _mean(difference)
        if mean is None:
            continue
        # The same drawn queries, the same weights: the resampled mean difference is the
        # difference of the resampled means, each centred on the pair's own mean.
        shifted = (resampled[a] - means[a]) - (resampled[b] - means[b]) + mean
        pair_intervals[i] = _percentile(mean, shifted, difference, confidence)
    return intervals[: len(matrix)], pair_intervals


# Flips x queries x pairs the all-pairs randomization tests may cost (a few seconds of matrix
# products); past it, fewer flips are drawn for every pair.
_FLIP_WORK = 20_000_000_000


def _pair_flips(samples: int, shape: tuple[int, ...]) -> int:
    """Sign flips for the tests of every pair: `samples`, fewer where 64 systems over 100,000
    queries would take minutes (then p-values are resolved to about 1 / flips)."""
    pairs, queries = shape
    return min(samples, max(1_000, _FLIP_WORK // max(1, pairs * queries)))


def _counts(indices: npt.NDArray[np.int64], queries: int) -> FloatArray:
    """How often each resample (row of ``indices``) drew each query (column)."""
    import numpy as np

    size = len(indices)
    offsets = (np.arange(size) * queries)[:, np.newaxis]
    counts = np.bincount((indices + offsets).ravel(), minlength=size * queries)
    return counts.reshape(size, queries).astype(np.float64)


def _sign_flip_p_values(differences: FloatArray, samples: int, seed: int) -> list[float | None]:
    """Two-sided sign-flip p-value of each row's mean difference (NaN = left out), one set of
    flips for all rows.

    The statistic is the sum of the differences (the mean times a count the flips do not
    change); a flip of a left-out query flips a zero. A flipped sum counts as at least as
    extreme when its magnitude is within rounding of the observed one: a row of zeros, or a
    system against itself, then gets p = 1.
    """
    import numpy as np

    if not len(differences):
        return []
    present = ~np.isnan(differences)
    filled = np.where(present, differences, 0.0)
    observed = np.abs(filled.sum(axis=1))
    tolerance = 1e-9 * np.abs(filled).sum(axis=1)
    hits = np.zeros(len(differences), dtype=np.int64)
    _, flips = _generators(seed)
    for size in _chunks(samples, differences.shape[1]):
        # Sum with signs s = 1 - 2 * flipped: total - 2 * (sum of the flipped differences).
        flipped = flips.integers(0, 2, size=(size, differences.shape[1]), dtype=np.uint8)
        sums = filled.sum(axis=1) - 2 * (flipped.astype(np.float64) @ filled.T)
        hits += np.count_nonzero(np.abs(sums) >= observed - tolerance, axis=0)
    return [
        float((row_hits + 1) / (samples + 1)) if row_present.any() else None
        for row_hits, row_present in zip(hits, present, strict=True)
    ]


def _paired_test(interval: Interval, p_value: float | None, count: int) -> PairedTest:
    return PairedTest(interval.mean, interval.low, interval.high, p_value, count)
