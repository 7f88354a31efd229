"""Bootstrap intervals and paired randomization tests: by hand, against scipy, and properties."""

from __future__ import annotations

import math
import tracemalloc
from dataclasses import astuple

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from tierank.evaluation import (
    Interval,
    bootstrap_interval,
    compare_systems,
    paired_test,
    rank_by_mean,
    system_intervals,
)


def _scores(size, seed, shift=0.0):
    return list(np.random.default_rng(seed).random(size) + shift)


# ---- bootstrap_interval ------------------------------------------------------------------------


def test_no_value_and_one_value():
    assert bootstrap_interval([]) == Interval(None, None, None)
    assert bootstrap_interval([None, None]) == Interval(None, None, None)
    assert bootstrap_interval([None, 0.25]) == Interval(0.25, 0.25, 0.25)


def test_two_values_by_hand():
    # Resampling [0, 1] gives a mean of 0, 0.5 or 1 with probabilities 1/4, 1/2, 1/4: the 95%
    # interval runs from 0 to 1; the 40% interval (quantiles 0.3 and 0.7) is just 0.5.
    assert bootstrap_interval([0.0, 1.0], samples=4000) == Interval(0.5, 0.0, 1.0)
    assert bootstrap_interval([0.0, 1.0], confidence=0.4, samples=4000) == Interval(0.5, 0.5, 0.5)


def test_equal_values_give_exactly_that_value():
    assert bootstrap_interval([0.1] * 7, samples=200) == Interval(0.1, 0.1, 0.1)


def test_seeded_and_reproducible():
    values = _scores(30, seed=1)
    assert bootstrap_interval(values, seed=5) == bootstrap_interval(values, seed=5)
    assert bootstrap_interval(values, seed=5) != bootstrap_interval(values, seed=6)


def test_bad_settings_and_values_are_refused():
    with pytest.raises(ValueError, match="confidence"):
        bootstrap_interval([1.0, 2.0], confidence=1.0)
    with pytest.raises(ValueError, match="samples"):
        bootstrap_interval([1.0, 2.0], samples=0)
    with pytest.raises(ValueError, match="finite"):
        bootstrap_interval([1.0, math.nan])
    with pytest.raises(ValueError, match="length"):
        paired_test([1.0], [1.0, 2.0])
    with pytest.raises(ValueError, match="alpha"):
        compare_systems({"a": {"q": 1.0}}, alpha=0)


def test_matches_scipy_percentile_bootstrap():
    values = _scores(50, seed=2)
    ours = bootstrap_interval(values, samples=10_000, seed=3)
    theirs = stats.bootstrap(
        (values,), np.mean, method="percentile", n_resamples=10_000, rng=np.random.default_rng(4)
    ).confidence_interval
    assert ours.mean == pytest.approx(np.mean(values))
    # Two independent Monte-Carlo estimates of each bound: their standard deviation is about
    # 0.0015 here (the quantile's sampling error for 10,000 resamples, times sqrt 2).
    assert ours.low == pytest.approx(theirs.low, abs=0.006)
    assert ours.high == pytest.approx(theirs.high, abs=0.006)


# ---- paired_test -------------------------------------------------------------------------------


def test_paired_test_by_hand():
    # Differences 1, 2, 3: of the 8 sign patterns, only +++ and --- reach |sum| >= 6: p = 1/4.
    test = paired_test([1.0, 2.0, 3.0], [0.0, 0.0, 0.0], samples=20_000)
    assert test.difference == 2.0
    assert test.count == 3
    assert test.p_value == pytest.approx(0.25, abs=0.015)
    # Resampled mean differences lie between the smallest and largest difference.
    assert 1.0 <= test.low <= test.difference <= test.high <= 3.0


def test_paired_test_leaves_out_queries_missing_on_either_side():
    test = paired_test([1.0, None, 3.0, 0.5], [0.0, 1.0, None, 0.25], samples=500)
    assert test.count == 2
    assert test.difference == pytest.approx((1.0 + 0.25) / 2)
    empty = paired_test([None], [1.0])
    assert (empty.difference, empty.low, empty.high, empty.p_value, empty.count) == (
        None,
        None,
        None,
        None,
        0,
    )


def test_one_pair_cannot_be_told_apart():
    test = paired_test([0.9], [0.1], samples=300)
    assert (test.difference, test.low, test.high, test.p_value) == pytest.approx(
        (0.8, 0.8, 0.8, 1.0)
    )


def _mean_difference(x, y, axis):
    return np.mean(x - y, axis=axis)


def test_p_value_matches_scipy_exact_permutation_test():
    # 10 pairs: scipy enumerates all 2^10 sign patterns; ours samples 10,000 of them.
    a, b = _scores(10, seed=7, shift=0.15), _scores(10, seed=8)
    exact = stats.permutation_test(
        (a, b), _mean_difference, permutation_type="samples", vectorized=True, n_resamples=9_999
    ).pvalue
    ours = paired_test(a, b, samples=10_000, seed=1)
    assert 0.01 < exact < 0.5, "the case should be neither obvious nor hopeless"
    # Monte-Carlo standard error sqrt(p (1 - p) / 10,000) <= 0.005.
    assert ours.p_value == pytest.approx(exact, abs=0.02)


def test_p_value_matches_scipy_randomized_permutation_test():
    a, b = _scores(200, seed=9, shift=0.01), _scores(200, seed=10)
    theirs = stats.permutation_test(
        (a, b),
        _mean_difference,
        permutation_type="samples",
        vectorized=True,
        n_resamples=10_000,
        rng=np.random.default_rng(11),
    ).pvalue
    ours = paired_test(a, b, samples=10_000, seed=2).p_value
    assert 0.01 < theirs < 0.5
    assert ours == pytest.approx(theirs, abs=0.03)


def test_p_value_is_never_zero():
    test = paired_test([1.0] * 30, [0.0] * 30, samples=999)
    # Only the 2 of 2^30 patterns all + or all - are as extreme: none drawn, p = 1 / 1000.
    assert test.p_value == pytest.approx(1 / 1000)


# ---- properties --------------------------------------------------------------------------------

_values = st.lists(st.floats(-1e3, 1e3, allow_nan=False), min_size=1, max_size=25)


@settings(max_examples=60, deadline=None)
@given(values=_values, confidence=st.floats(0.5, 0.99), seed=st.integers(0, 2**32))
def test_interval_contains_the_mean(values, confidence, seed):
    interval = bootstrap_interval(values, confidence=confidence, samples=200, seed=seed)
    assert interval.low <= interval.mean <= interval.high


@settings(max_examples=60, deadline=None)
@given(values=_values)
def test_a_system_against_itself(values):
    test = paired_test(values, values, samples=200)
    assert (test.difference, test.low, test.high, test.p_value) == (0.0, 0.0, 0.0, 1.0)


@settings(max_examples=60, deadline=None)
@given(
    pairs=st.lists(
        st.tuples(st.floats(0, 1), st.floats(0, 1) | st.none()), min_size=1, max_size=25
    ),
    seed=st.integers(0, 2**32),
)
def test_swapping_negates_the_difference(pairs, seed):
    a, b = [x for x, _ in pairs], [y for _, y in pairs]
    forward = paired_test(a, b, samples=200, seed=seed)
    backward = paired_test(b, a, samples=200, seed=seed)
    assert backward.count == forward.count
    assert backward.p_value == forward.p_value
    if forward.count:
        assert backward.difference == -forward.difference
        assert backward.low == pytest.approx(-forward.high, abs=1e-12)
        assert backward.high == pytest.approx(-forward.low, abs=1e-12)
        assert forward.low <= forward.high


# ---- compare_systems ---------------------------------------------------------------------------


def _per_query(*systems, queries=40):
    return {
        name: {f"q{i:03d}": v for i, v in enumerate(_scores(queries, seed, shift))}
        for name, seed, shift in systems
    }


def test_ranking_by_mean_ties_by_name_and_none_last():
    assert rank_by_mean({"c": 0.5, "b": None, "a": 0.5, "d": 0.9, "e": None}) == [
        "d",
        "a",
        "c",
        "b",
        "e",
    ]


def test_compare_systems_by_hand():
    per_query = {
        "good": {"q1": 1.0, "q2": 0.75, "q3": 0.5},
        "poor": {"q1": 0.0, "q2": 0.25, "q3": 0.0},
        "empty": {"q1": None},
        "same": {"q1": 0.0, "q2": 0.25, "q3": 0.0},
    }
    result = compare_systems(per_query, samples=2000)
    assert result.ranking == ["good", "poor", "same", "empty"]
    assert result.intervals["good"].mean == 0.75
    assert result.intervals["empty"] == Interval(None, None, None)
    pairs = [(c.better, c.worse) for c in result.adjacent]
    assert pairs == [("good", "poor"), ("poor", "same"), ("same", "empty")]
    good_poor, poor_same, same_empty = result.adjacent
    assert good_poor.test.difference == pytest.approx(2 / 3)
    assert good_poor.test.count == 3
    # Three positive differences: +++ and --- are the extreme patterns, p about 1/4.
    assert good_poor.test.p_value == pytest.approx(0.25, abs=0.03)
    assert not good_poor.distinguishable
    assert poor_same.test.p_value == 1.0 and poor_same.test.difference == 0.0
    assert same_empty.test.count == 0 and same_empty.test.p_value is None
    assert not same_empty.distinguishable


def test_no_system_and_one_system():
    assert compare_systems({}) == compare_systems({}, samples=1)
    assert compare_systems({}).ranking == []
    alone = compare_systems({"only": {"q1": 0.5, "q2": 0.25}}, samples=100)
    assert (alone.ranking, alone.adjacent) == (["only"], [])
    assert alone.intervals["only"].mean == 0.375


def test_distinguishable_is_p_below_alpha():
    per_query = _per_query(("high", 1, 0.3), ("low", 2, 0.0), ("twin", 2, 0.0))
    result = compare_systems(per_query, samples=2000)
    high_low, low_twin = result.adjacent
    assert high_low.test.p_value < 0.05 and high_low.distinguishable
    assert low_twin.test.p_value == 1.0 and not low_twin.distinguishable
    lenient = compare_systems(per_query, samples=2000, alpha=0.999)
    assert [c.distinguishable for c in lenient.adjacent] == [True, False]


def test_compare_systems_is_the_paired_functions_on_complete_data():
    per_query = _per_query(("a", 1, 0.05), ("b", 2, 0.0), ("c", 3, 0.02))
    result = compare_systems(per_query, samples=3000, seed=9)
    for system, values in per_query.items():
        alone = bootstrap_interval(list(values.values()), samples=3000, seed=9)
        assert astuple(result.intervals[system]) == pytest.approx(astuple(alone), abs=1e-12)
    for comparison in result.adjacent:
        better = list(per_query[comparison.better].values())
        worse = list(per_query[comparison.worse].values())
        alone = paired_test(better, worse, samples=3000, seed=9)
        assert astuple(comparison.test) == pytest.approx(astuple(alone), abs=1e-12)
    assert system_intervals(per_query, samples=3000, seed=9) == result.intervals


def test_missing_values_are_left_out_per_system():
    per_query = _per_query(("a", 1, 0.0), ("b", 2, 0.0))
    per_query["a"]["q000"] = None
    del per_query["b"]["q001"]
    result = compare_systems(per_query, samples=500)
    a_values = [v for v in per_query["a"].values() if v is not None]
    assert result.intervals["a"].mean == pytest.approx(np.mean(a_values))
    assert result.intervals["b"].mean == pytest.approx(np.mean(list(per_query["b"].values())))
    [comparison] = result.adjacent
    assert comparison.test.count == 38


def test_memory_stays_bounded_at_study_scale():
    """2,000 queries x 6 systems x 10,000 resamples: chunked, so tens of MB, not gigabytes."""
    per_query = {
        f"s{i}": {f"q{j:04d}": v for j, v in enumerate(_scores(2000, seed=i, shift=0.05 * i))}
        for i in range(6)
    }
    tracemalloc.start()
    try:
        result = compare_systems(per_query, samples=10_000)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 150 * 2**20
    assert result.ranking == ["s5", "s4", "s3", "s2", "s1", "s0"]
