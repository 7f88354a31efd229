"""Prediction-powered means: a study's estimate corrected by what a human sample says of it.

A study labels every query with a judge; a person labels a few of its queries (the sample).
Over the sample, the human value Y of a query and the study's own value f for it (from labels
that did not see that query's human grades) differ by the judge's error. The
prediction-powered estimate (Angelopoulos et al., "Prediction-powered inference", Science
2023) of the mean a person would give over the study's N queries is

    θ = λ · mean over the N queries of f  +  mean over the n sample queries of (Y − λ f)

with the power-tuning weight λ of PPI++ (Angelopoulos, Duchi & Zrnic 2023), the one that makes
the correction vary least (the regression slope of Y on f over the sample, kept within
[0, MAX_WEIGHT]; λ = 1 is the plain correction). The target is the mean over *these* queries
(what labelling every one of them by hand would give), and the sample is taken as a simple
random sample of them (`tierank study sample`): the uncertainty is that of the correction,

    se² = (1 − n/N) · s²(Y − λ f) / n

(the finite-population correction: a sample of every query leaves none), and the interval is
θ ± t(n − 1) · se. It includes the judge's error, which the bootstrap over queries with the
labels taken as fixed does not; it does not include the choice of the study's queries from
all queries one could ask (a bootstrap over queries adds that). A paired difference between
two systems is the same estimate of the per-query differences, tested with its t statistic.

Pure Python; Student's t distribution from the regularized incomplete beta function.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

# λ at most: the study's differences between systems can be compressed (a judge that grades
# everything alike), which a weight above 1 would stretch back; beyond 2 a slope from a dozen
# queries is mostly noise.
MAX_WEIGHT = 2.0


@dataclass(frozen=True)
class PredictionPowered:
    """The estimate of a mean over ``queries`` queries from the study's values and the human
    values of ``sample`` of them: ``mean`` with its interval (``low``, ``high``) and
    ``standard_error``, ``weight`` the λ used, ``p_value`` of the two-sided t test of a mean
    of zero (for a difference). Interval, error and p-value are None with fewer than two
    sample queries."""

    mean: float | None
    low: float | None
    high: float | None
    standard_error: float | None
    p_value: float | None
    sample: int
    queries: int
    weight: float


def prediction_powered_mean(
    predicted: Mapping[str, float | None],
    human: Mapping[str, float | None],
    confidence: float = 0.95,
    weight: float | None = None,
) -> PredictionPowered:
    """The prediction-powered mean of the queries of ``predicted`` (query -> the study's
    value, None for NA; a sample query's value must come from labels that did not see its
    human grades), corrected by ``human`` (sample query -> the human value, None for NA).
    Queries NA on either side are left out of the sample; queries NA in ``predicted`` out of
    the mean."""
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must lie in (0, 1), got {confidence}")
    values = [v for v in predicted.values() if v is not None]
    pairs = [
        (y, f)
        for query, y in human.items()
        if y is not None and (f := predicted.get(query)) is not None
    ]
    total, n = len(values), len(pairs)
    if not total:
        return PredictionPowered(None, None, None, None, None, n, total, 1.0)
    mean_f = math.fsum(values) / total
    if not n:
        return PredictionPowered(mean_f, None, None, None, None, 0, total, 1.0)
    if weight is None:
        weight = _weight(pairs)
    corrections = [y - weight * f for y, f in pairs]
    correction = math.fsum(corrections) / n
    estimate = weight * mean_f + correction
    if n < 2:
        return PredictionPowered(estimate, None, None, None, None, n, total, weight)
    spread = math.fsum((c - correction) ** 2 for c in corrections) / (n - 1)
    unsampled = max(0.0, 1.0 - n / total)
    error = math.sqrt(unsampled * spread / n)
    half = student_t_quantile(1 - (1 - confidence) / 2, n - 1) * error
    p_value = 1.0 if error == 0 else 2 * (1 - student_t_cdf(abs(estimate) / error, n - 1))
    if error == 0 and estimate != 0:
        p_value = 0.0
    return PredictionPowered(
        estimate, estimate - half, estimate + half, error, p_value, n, total, weight
    )


def pooled_weight(
    families: Sequence[tuple[Mapping[str, float | None], Mapping[str, float | None]]],
) -> float:
    """One λ for several estimates of the same kind (each system's mean of one measure): the
    slope of Y on f within each, pooled over all, so that a dozen sample queries times the
    systems decide it, not a dozen alone."""
    across = 0.0
    spread = 0.0
    count = 0
    for predicted, human in families:
        pairs = [
            (y, f)
            for query, y in human.items()
            if y is not None and (f := predicted.get(query)) is not None
        ]
        if len(pairs) < 2:
            continue
        mean_y = math.fsum(y for y, _ in pairs) / len(pairs)
        mean_f = math.fsum(f for _, f in pairs) / len(pairs)
        across += math.fsum((y - mean_y) * (f - mean_f) for y, f in pairs)
        spread += math.fsum((f - mean_f) ** 2 for _, f in pairs)
        count += len(pairs)
    if count < 3 or spread <= 1e-12:
        return 1.0
    return min(MAX_WEIGHT, max(0.0, across / spread))


def _weight(pairs: list[tuple[float, float]]) -> float:
    """PPI++'s λ: the slope of Y on f over the sample, within [0, MAX_WEIGHT]; 1 where the
    sample cannot say (fewer than three queries, or f the same on all)."""
    if len(pairs) < 3:
        return 1.0
    mean_y = math.fsum(y for y, _ in pairs) / len(pairs)
    mean_f = math.fsum(f for _, f in pairs) / len(pairs)
    spread = math.fsum((f - mean_f) ** 2 for _, f in pairs)
    if spread <= 1e-12:
        return 1.0
    slope = math.fsum((y - mean_y) * (f - mean_f) for y, f in pairs) / spread
    return min(MAX_WEIGHT, max(0.0, slope))


# -- Student's t ------------------------------------------------------------------------------


def student_t_cdf(t: float, freedom: float) -> float:
    """P(T <= t) for Student's t with `freedom` degrees of freedom."""
    if freedom <= 0:
        raise ValueError(f"degrees of freedom must be positive, got {freedom}")
    if math.isinf(t):
        return 1.0 if t > 0 else 0.0
    tail = 0.5 * _incomplete_beta(freedom / (freedom + t * t), freedom / 2, 0.5)
    return 1 - tail if t >= 0 else tail


def student_t_quantile(probability: float, freedom: float) -> float:
    """The t with P(T <= t) = probability, by bisection (to 1e-10)."""
    if not 0 < probability < 1:
        raise ValueError(f"probability must lie in (0, 1), got {probability}")
    if probability < 0.5:
        return -student_t_quantile(1 - probability, freedom)
    low, high = 0.0, 1.0
    while student_t_cdf(high, freedom) < probability:
        low, high = high, high * 2
    for _ in range(200):
        middle = (low + high) / 2
        if student_t_cdf(middle, freedom) < probability:
            low = middle
        else:
            high = middle
        if high - low < 1e-10:
            break
    return (low + high) / 2


def _incomplete_beta(x: float, a: float, b: float) -> float:
    """The regularized incomplete beta function I_x(a, b) (Numerical Recipes' continued
    fraction, evaluated where it converges fast)."""
    if x <= 0:
        return 0.0
    if x >= 1:
        return 1.0
    front = math.exp(
        math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    )
    if x < (a + 1) / (a + b + 2):
        return front * _beta_fraction(x, a, b) / a
    return 1 - front * _beta_fraction(1 - x, b, a) / b


def _beta_fraction(x: float, a: float, b: float) -> float:
    tiny = 1e-300
    c, d = 1.0, 1 - (a + b) * x / (a + 1)
    d = 1 / (d if abs(d) > tiny else tiny)
    result = d
    for m in range(1, 500):
        for numerator in (
            m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
            -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1)),
        ):
            d = 1 + numerator * d
            d = 1 / (d if abs(d) > tiny else tiny)
            c = 1 + numerator / c
            c = c if abs(c) > tiny else tiny
            result *= c * d
        if abs(c * d - 1) < 1e-14:
            break
    return result
