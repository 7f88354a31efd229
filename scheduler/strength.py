"""Strength of each candidate from every vote so far: a Bradley–Terry model with a prior.

The majority graph keeps only who beat whom; while a tournament is unfinished most pairs are
unknown, and the condensation order of such a graph ranks a tail batch's winner beside the
head's. Bradley–Terry weighs each win by whom it was over, so a candidate that beat strong ones
ranks above one that beat weak ones, and uses every vote, not just majorities.

The first-stage (retrieval) order is the prior. Every candidate plays one game against a fixed
anchor of average strength, and wins a share of it that falls with its first-stage rank: the
first wins 0.5 + lean/2, the last 0.5 − lean/2. Real votes soon outweigh that game; a candidate
never shown keeps the strength it gives, so such candidates sit in the first-stage order. The
game also keeps strengths finite: a first wave's votes are separable (each batch a total order),
and without it strengths drift apart without bound and a candidate seen once counts as surely
as one seen often.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

# The anchor game's weight, half of it won and half lost.
ANCHOR_VOTES = 1.0
# Sweeps of minorization–maximization. Converging fully takes hundreds (a chain of batches
# passes evidence on slowly), for nDCG@10 within 0.001 of FINAL_SWEEPS on the ranking
# benchmark (bench/ranking/RESULTS.md). The order a job ends with gets FINAL_SWEEPS; the
# provisional orders the server lists after every recorded batch of verdicts get
# PROVISIONAL_SWEEPS, since the fit is most of what listing the tiers costs (bench/README.md,
# section 1).
FINAL_SWEEPS = 30
PROVISIONAL_SWEEPS = 8


class Strengths:
    """The votes of a tournament, gathered as they arrive for Bradley–Terry fits: the server
    refits after every recorded batch of verdicts, and regrouping every vote each time cost as
    much as the fit itself."""

    def __init__(self, size: int, lean: float) -> None:
        shares = [_prior_share(candidate, size, lean) for candidate in range(size)]
        self._won = [ANCHOR_VOTES * share for share in shares]
        # The anchor game alone: s / (s + 1) = share. A candidate without other games keeps it.
        self._prior = [share / (1 - share) for share in shares]
        # Per candidate: games played with each opponent, and a tuple of them for the sweeps,
        # rebuilt only for candidates whose games changed.
        self._games: list[dict[int, float]] = [{} for _ in range(size)]
        self._played: dict[int, tuple[tuple[int, float], ...]] = {}
        # The strengths after the latest fit of these votes and its number of sweeps: a fit
        # with more sweeps goes on from there (the job's final fit after a provisional one).
        self._swept: tuple[int, list[float]] | None = None

    def add_ordering(self, ordering: Sequence[int], weight: float) -> None:
        """A verdict's C(len, 2) votes of `weight`, best first, as the vote tally counts them."""
        if weight <= 0:
            return
        won, played = self._won, self._played
        self._swept = None
        last = len(ordering) - 1
        # Per candidate, as pair by pair in best-first order: one game with each other
        # candidate of the ordering, opponents in the ordering's order (which fixes the order
        # `fit` sums them in), and a win added (one at a time) for each candidate below it.
        for place, candidate in enumerate(ordering):
            games = self._games[candidate]
            for other in ordering:
                if other != candidate:
                    games[other] = games.get(other, 0.0) + weight
            total = won[candidate]
            for _ in range(last - place):
                total += weight
            won[candidate] = total
            played.pop(candidate, None)

    def fit(self, sweeps: int = FINAL_SWEEPS) -> list[float]:
        """Log-strengths of candidates 0..size-1 (first-stage order) after `sweeps` sweeps.

        Deterministic for the same votes added in the same order: it starts from the prior's
        strengths and sweeps in index order (Gauss–Seidel MM, Hunter 2004), so a replayed job
        ranks alike. Going on from an earlier fit of the same votes after fewer sweeps is the
        same computation.
        """
        played = []
        for candidate, games in enumerate(self._games):
            if games:
                view = self._played.get(candidate)
                if view is None:
                    view = self._played[candidate] = tuple(games.items())
                played.append((candidate, view, self._won[candidate]))
        done, strength = 0, self._prior
        if self._swept is not None and self._swept[0] <= sweeps:
            done, strength = self._swept
        strength = list(strength)
        anchor = ANCHOR_VOTES
        for _ in range(sweeps - done):
            for candidate, opponents, won in played:
                own = strength[candidate]
                # The anchor has strength 1.
                denominator = anchor / (own + 1.0)
                for opponent, count in opponents:
                    denominator += count / (own + strength[opponent])
                strength[candidate] = won / denominator
        self._swept = (sweeps, strength)
        return list(map(math.log, strength))


def _prior_share(candidate: int, size: int, lean: float) -> float:
    """The share of its anchor game the candidate at first-stage rank `candidate` wins."""
    if size < 2:
        return 0.5
    return 0.5 + lean * (0.5 - candidate / (size - 1))
