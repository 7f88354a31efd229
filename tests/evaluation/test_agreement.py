"""κ, τ-b, ρ, RBO and the cyclic-triple rate on hand-checked cases."""

from __future__ import annotations

import math
import random
from itertools import combinations

import pytest
from scipy import stats

from tierank.evaluation import (
    binary_kappa,
    cohen_kappa,
    confusion_matrix,
    kendall_tau_b,
    non_transitivity,
    preferences_from_outcomes,
    rank_biased_overlap,
    spearman_rho,
)


def test_binary_kappa_by_hand():
    # Pairs (A, B): (1,1) x5, (1,0) x1, (0,1) x1, (0,0) x3 -> observed agreement 0.8.
    # Both raters say 1 six times in ten: chance agreement 0.6² + 0.4² = 0.52.
    # κ = (0.8 − 0.52) / (1 − 0.52) = 0.28 / 0.48 = 7/12.
    a = [3, 2, 0, 1, 2, 0, 3, 2, 1, 2]
    b = [2, 1, 0, 0, 3, 2, 2, 3, 0, 2]
    assert binary_kappa(a, b, threshold=2) == pytest.approx(7 / 12)


def test_confusion_matrix_behind_it():
    matrix = confusion_matrix([0, 1, 2, 2], [0, 2, 2, 1])
    assert matrix.categories == (0, 1, 2)
    assert matrix.counts == ((1, 0, 0), (0, 0, 1), (0, 1, 1))
    with pytest.raises(ValueError, match="length"):
        confusion_matrix([0], [0, 1])
    with pytest.raises(ValueError, match="not among the categories"):
        confusion_matrix([0, 5], [0, 1], categories=[0, 1])


def test_weighted_kappa_by_hand():
    # A = [0,1,2,2], B = [0,2,2,1]; marginals rows = cols = [1, 1, 2], n = 4.
    # Linear: observed = (|1−2| + |2−1|) / 4 = 0.5; chance = Σ|i−j| r_i c_j / 16 = 14/16.
    #   κ = 1 − 0.5 / 0.875 = 3/7.
    # Quadratic: observed = 0.5; chance = Σ(i−j)² r_i c_j / 16 = 22/16; κ = 1 − 0.5/1.375 = 7/11.
    # Unweighted: observed agreement 0.5, chance (1 + 1 + 4) / 16 = 0.375; κ = 0.125/0.625 = 0.2.
    a, b = [0, 1, 2, 2], [0, 2, 2, 1]
    assert cohen_kappa(a, b, "linear") == pytest.approx(3 / 7)
    assert cohen_kappa(a, b, "quadratic") == pytest.approx(7 / 11)
    assert cohen_kappa(a, b) == pytest.approx(0.2)


def test_kappa_is_undefined_when_both_raters_use_one_category():
    assert cohen_kappa([1, 1, 1], [1, 1, 1]) is None
    assert cohen_kappa([0, 1, 2], [0, 1, 2], "quadratic") == 1.0


def test_kendall_and_spearman_match_scipy_with_ties():
    rng = random.Random(7)
    for _ in range(20):
        n = rng.randint(3, 15)
        x = [rng.choice([0.1, 0.2, 0.3, 0.4]) for _ in range(n)]
        y = [rng.choice([1, 2, 3]) for _ in range(n)]
        if len(set(x)) == 1 or len(set(y)) == 1:
            continue
        assert kendall_tau_b(x, y) == pytest.approx(stats.kendalltau(x, y).statistic)
        assert spearman_rho(x, y) == pytest.approx(stats.spearmanr(x, y).statistic)
    assert kendall_tau_b([1, 1, 1], [1, 2, 3]) is None


def test_rbo_hand_cases():
    # Swapped pair, p = 0.5: agreement 0 at depth 1 and 1 from depth 2 on.
    # Extrapolated: (1 − p) Σ_{d≥2} p^(d−1) = p = 0.5.
    # Lower bound (Webber eq. 11, k = 2, X = [0, 2]):
    #   (1−p)/p [ (0−2)/1 · p + (2−2)/2 · p² − 2 ln(1−p) ] = −1 + 2 ln 2 = 0.3863.
    swapped = rank_biased_overlap(["a", "b"], ["b", "a"], p=0.5)
    assert swapped.extrapolated == pytest.approx(0.5)
    assert swapped.lower_bound == pytest.approx(-1 + 2 * math.log(2))
    assert swapped.value == swapped.extrapolated
    identical = rank_biased_overlap(list("abc"), list("abc"))
    assert identical.extrapolated == pytest.approx(1.0)
    # (0.1/0.9) [ (1−3)·0.9 + (2−3)/2 · 0.81 + 3 ln 10 ] = 0.5225
    assert identical.lower_bound == pytest.approx(0.1 / 0.9 * (-1.8 - 0.405 + 3 * math.log(10)))
    disjoint = rank_biased_overlap(list("abc"), list("xyz"))
    assert (disjoint.lower_bound, disjoint.extrapolated) == (0.0, 0.0)


def test_rbo_matches_its_infinite_series():
    """Both forms are the RBO series with a stated assumption about the unseen depths."""
    a, b, p = list("abcdefg"), list("bdagcxe"), 0.8
    depth = len(a)
    agreement = [len(set(a[:d]) & set(b[:d])) / d for d in range(1, depth + 1)]
    overlap_at_end = agreement[-1] * depth

    def series(tail_agreement):
        head = sum(p ** (d - 1) * agreement[d - 1] for d in range(1, depth + 1))
        tail = sum(p ** (d - 1) * tail_agreement(d) for d in range(depth + 1, 2000))
        return (1 - p) * (head + tail)

    result = rank_biased_overlap(a, b, p)
    assert result.lower_bound == pytest.approx(series(lambda d: overlap_at_end / d))
    assert result.extrapolated == pytest.approx(series(lambda d: agreement[-1]))


def test_rbo_of_uneven_rankings():
    # S = [a], L = [a, b], p = 0.5: X_1 = 1, X_2 = 1.
    # Extrapolated (eq. 32): (1−p)/p [1/1·p + 1/2·p² + 1·(2−1)/(1·2)·p²] + (0/2 + 1/1)·p² = 1.
    assert rank_biased_overlap(["a"], ["a", "b"], 0.5).extrapolated == pytest.approx(1.0)
    with pytest.raises(ValueError, match="twice"):
        rank_biased_overlap(["a", "a"], ["a"])


def test_cyclic_triples_by_hand():
    # a>b, b>c, c>a is a cycle; d loses to all three, so abd, acd, bcd are transitive: 1 of 4.
    # e met only a, so no triple with e is fully judged.
    outcomes = [("a", "b"), ("b", "c"), ("c", "a"), ("a", "d"), ("b", "d"), ("c", "d"), ("a", "e")]
    result = non_transitivity(preferences_from_outcomes(outcomes))
    assert (result.cyclic, result.judged, result.rate) == (1, 4, 0.25)


def test_majority_decides_and_ties_break_cycles():
    # b>a by 2 votes to 1 reverses the cycle's a>b edge; with a tie there is no cycle at all.
    votes = {("a", "b"): 1, ("b", "a"): 2, ("b", "c"): 1, ("c", "a"): 1}
    assert non_transitivity(votes).cyclic == 0
    assert non_transitivity({("a", "b"): 2, ("b", "c"): 1, ("c", "a"): 1}).cyclic == 1
    tied = non_transitivity({("a", "b"): 1, ("b", "a"): 1, ("b", "c"): 1, ("c", "a"): 1})
    assert (tied.cyclic, tied.judged) == (0, 1)
    assert non_transitivity({}).rate is None


def test_cyclic_triples_match_brute_force():
    rng = random.Random(3)
    items = list(range(12))
    votes = {}
    for a, b in combinations(items, 2):
        if rng.random() < 0.7:
            votes[(a, b) if rng.random() < 0.5 else (b, a)] = rng.randint(1, 3)
    beats = {pair for pair in votes}
    judged = {frozenset(pair) for pair in votes}
    expected_judged = expected_cyclic = 0
    for x, y, z in combinations(items, 3):
        if all(frozenset(p) in judged for p in ((x, y), (y, z), (x, z))):
            expected_judged += 1
            expected_cyclic += {(x, y), (y, z), (z, x)} <= beats or {
                (y, x),
                (z, y),
                (x, z),
            } <= beats
    result = non_transitivity(votes)
    assert (result.cyclic, result.judged) == (expected_cyclic, expected_judged)
    assert expected_cyclic > 0
