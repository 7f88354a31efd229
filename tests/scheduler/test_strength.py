"""What `Strengths.fit` computes: the Bradley–Terry maximum-likelihood strengths of the votes
plus one anchor game per candidate whose share follows the first-stage order, checked against a
straightforward Newton solution of that likelihood written here from the model alone."""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from itertools import combinations, pairwise

import numpy as np
import pytest

from tierank.scheduler.strength import (
    ANCHOR_VOTES,
    FINAL_SWEEPS,
    PROVISIONAL_SWEEPS,
    Strengths,
)

Orderings = Sequence[tuple[Sequence[int], float]]


def anchor_shares(size: int, lean: float) -> np.ndarray:
    """The share of its anchor game each candidate wins: 0.5 ± lean/2 from first to last."""
    if size < 2:
        return np.full(size, 0.5)
    return 0.5 + lean * (0.5 - np.arange(size) / (size - 1))


def win_matrix(size: int, orderings: Orderings) -> np.ndarray:
    """wins[a, b]: the weight of votes a over b; a verdict ranks each earlier id over each later."""
    wins = np.zeros((size, size))
    for ordering, weight in orderings:
        for winner, loser in combinations(ordering, 2):
            wins[winner, loser] += weight
    return wins


def log_likelihood(theta: np.ndarray, wins: np.ndarray, shares: np.ndarray) -> float:
    """Of log-strengths `theta`: each vote a over b has probability σ(θa − θb); each candidate
    plays ANCHOR_VOTES against an anchor of log-strength 0 and wins its share of them."""
    anchor = ANCHOR_VOTES * (shares * theta - np.logaddexp(0.0, theta)).sum()
    pairs = -(wins * np.logaddexp(0.0, theta[None, :] - theta[:, None])).sum()
    return float(anchor + pairs)


def maximum_likelihood(size: int, orderings: Orderings, lean: float) -> np.ndarray:
    """Damped Newton on the (strictly concave, thanks to the anchor games) log-likelihood."""
    wins, shares = win_matrix(size, orderings), anchor_shares(size, lean)
    games = wins + wins.T
    theta = np.zeros(size)
    for _ in range(200):
        own = 1.0 / (1.0 + np.exp(-theta))
        beats = 1.0 / (1.0 + np.exp(theta[None, :] - theta[:, None]))
        gradient = ANCHOR_VOTES * (shares - own) + (wins - games * beats).sum(axis=1)
        if np.abs(gradient).max() < 1e-10:
            return theta
        spread = games * beats * (1.0 - beats)
        hessian = spread.copy()
        np.fill_diagonal(hessian, -(ANCHOR_VOTES * own * (1.0 - own) + spread.sum(axis=1)))
        step = np.linalg.solve(hessian, -gradient)
        # Halve a step that lowers the likelihood (by more than rounding, near the top).
        now, scale = log_likelihood(theta, wins, shares), 1.0
        while log_likelihood(theta + scale * step, wins, shares) < now - 1e-12:
            scale /= 2
        theta = theta + scale * step
    raise AssertionError("Newton did not converge")


def fitted(size: int, orderings: Orderings, lean: float, sweeps: int = FINAL_SWEEPS) -> np.ndarray:
    strengths = Strengths(size, lean)
    for ordering, weight in orderings:
        strengths.add_ordering(ordering, weight)
    return np.array(strengths.fit(sweeps))


def best_first(strength: Sequence[float]) -> list[int]:
    return sorted(range(len(strength)), key=lambda candidate: -strength[candidate])


def small_tournaments() -> list[tuple[int, list[tuple[list[int], float]], float]]:
    """Pools of 2 to 7 with a few verdicts of 2 to all candidates, weights as ensembles give."""
    rng = random.Random(20250101)
    cases = []
    for _ in range(24):
        size = rng.randint(2, 7)
        orderings = [
            (rng.sample(range(size), rng.randint(2, size)), rng.choice([0.5, 1.0, 2.0]))
            for _ in range(rng.randint(1, 6))
        ]
        cases.append((size, orderings, rng.choice([0.0, 0.3, 0.5])))
    return cases


CASES = small_tournaments()


@pytest.mark.parametrize(("size", "orderings", "lean"), CASES)
def test_the_fit_converges_to_the_maximum_likelihood_strengths(size, orderings, lean):
    expected = maximum_likelihood(size, orderings, lean)
    np.testing.assert_allclose(fitted(size, orderings, lean, sweeps=5000), expected, atol=1e-6)


@pytest.mark.parametrize(("size", "orderings", "lean"), CASES[:8])
def test_every_sweep_raises_the_likelihood_toward_its_maximum(size, orderings, lean):
    wins, shares = win_matrix(size, orderings), anchor_shares(size, lean)
    best = log_likelihood(maximum_likelihood(size, orderings, lean), wins, shares)
    reached = [
        log_likelihood(fitted(size, orderings, lean, sweeps), wins, shares)
        for sweeps in range(0, 61)
    ]
    assert all(later >= earlier - 1e-12 for earlier, later in pairwise(reached))
    assert reached[-1] <= best + 1e-9
    # Most of the way there after the sweeps a job ends with.
    assert best - reached[FINAL_SWEEPS] <= 0.01 * (best - reached[0])


def test_a_fit_after_a_shorter_one_of_the_same_votes_is_the_fresh_fit_bit_for_bit():
    # The job's final fit goes on from the provisional one; a replay that fits only at the end
    # must get the same strengths, and a new vote must start the sweeps over.
    rng = random.Random(7)
    kept, votes = Strengths(30, 0.5), []
    for _ in range(12):
        ordering, weight = rng.sample(range(30), rng.randint(2, 10)), rng.choice([0.5, 1.0])
        kept.add_ordering(ordering, weight)
        votes.append((ordering, weight))
        for sweeps in (3, PROVISIONAL_SWEEPS, FINAL_SWEEPS, PROVISIONAL_SWEEPS, 3):
            fresh = Strengths(30, 0.5)
            for earlier, earlier_weight in votes:
                fresh.add_ordering(earlier, earlier_weight)
            assert kept.fit(sweeps) == fresh.fit(sweeps)


def test_one_verdict_counts_as_each_of_its_pairs_and_weight_adds_up():
    as_verdict = fitted(4, [([2, 0, 3], 1.0), ([2, 0, 3], 1.0)], lean=0.5, sweeps=200)
    as_pairs = fitted(4, [((2, 0), 2.0), ((2, 3), 2.0), ((0, 3), 2.0)], lean=0.5, sweeps=200)
    np.testing.assert_allclose(as_verdict, as_pairs, atol=1e-12)
    ignored = fitted(4, [([2, 0, 3], 0.0), ([3, 1], -1.0)], lean=0.5)
    np.testing.assert_allclose(ignored, fitted(4, [], lean=0.5), atol=0)


def test_a_chain_of_verdicts_against_the_first_stage_order_reverses_it():
    # One judge, batches overlapping by one candidate: 5 > 4 > 3, 3 > 2 > 1, 1 > 0.
    orderings = [([5, 4, 3], 1.0), ([3, 2, 1], 1.0), ([1, 0], 1.0)]
    for sweeps in (PROVISIONAL_SWEEPS, FINAL_SWEEPS):
        assert best_first(fitted(6, orderings, lean=0.5, sweeps=sweeps)) == [5, 4, 3, 2, 1, 0]


def test_the_first_stage_prior_holds_where_the_votes_are_weak():
    # Single votes one pair at a time against a 0.5 lean: only the ends move (the maximum of the
    # likelihood, not an artefact of too few sweeps).
    orderings = [((c + 1, c), 1.0) for c in range(5)]
    assert best_first(maximum_likelihood(6, orderings, 0.5)) == [5, 1, 2, 3, 4, 0]
    assert best_first(fitted(6, orderings, 0.5)) == [5, 1, 2, 3, 4, 0]
    doubled = [(pair, 2.0) for pair, _ in orderings]
    assert best_first(fitted(6, doubled, 0.5)) == [5, 4, 3, 2, 1, 0]


@pytest.mark.parametrize("lean", [0.0, 0.3, 0.5])
def test_candidates_never_shown_keep_their_prior_strength_and_first_stage_order(lean):
    size = 8
    strength = fitted(size, [([5, 2], 2.0), ([2, 6, 5], 1.0)], lean)
    never_shown = [0, 1, 3, 4, 7]
    shares = anchor_shares(size, lean)
    # The anchor game alone: s / (s + 1) = share.
    for candidate in never_shown:
        assert strength[candidate] == pytest.approx(
            math.log(shares[candidate] / (1 - shares[candidate])), abs=1e-12
        )
    if lean > 0:
        assert best_first([strength[c] for c in never_shown]) == list(range(len(never_shown)))
