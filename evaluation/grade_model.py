"""Grades from an order and a few noisy pointwise probes along it: a monotone hidden Markov
model fitted across a study's queries.

A tournament orders each query's pool (best first); a pointwise grader, asked about a few of
its documents, says 0–3 for each, wrong about half the time at the quality of GPT-4o with the
UMBRELA prompt. Neither alone makes good labels: the order has no grades, and one probe per
document is too noisy. This model reads the grades off the order with the probes:

- Along a query's order the grade can only stay or fall: a left-to-right hidden Markov chain
  over the grades 3, 2, 1, 0 whose state at each position is that document's grade.
- A probe is a noisy reading of its document's grade: P(probe | grade), the *emission*. Without
  a human sample it is a rounded Gaussian centred on the grade, clamped to 0–3, whose width
  (the grader's noise) is fitted by marginal likelihood; with one, each grade's offset and the
  common width are fitted to the sample's (human grade, probe) pairs: a grader that grades one
  level too high, or too low near the top, is read accordingly.
- The chain's start and its step-down probabilities (how many documents of each grade a pool
  of this study holds, and where) are learned by EM over every query of the study at once, so
  that a query with a dozen probes borrows the shape of the others; a query a person labelled
  enters as observed grades.
- Each document's label is its posterior median grade: the grade g with P(grade ≥ g) ≥ ½ and
  P(grade ≥ g + 1) < ½, the choice that minimises the expected absolute error.

A probe of a document placed too high or too low by the tournament is outvoted by its
neighbours, and a misread probe by the order: robustness comes from the model, not from asking
the same question twice (a grader at temperature 0 would only repeat itself).

Pure numpy; queries are processed in blocks of similar length, so memory stays bounded, and
the parameters are fitted on at most ``max_fit_queries`` of them (a seeded sample), every
query then decoded with them.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from tierank.limits import MAX_GRADE, MIN_GRADE

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

    FloatArray = npt.NDArray[np.float64]

# The grades, 0..GRADES-1: the TREC DL scale the pointwise graders answer on.
GRADES = MAX_GRADE - MIN_GRADE + 1
# Widths of the grader's noise tried when no human sample says what it is.
NOISE_GRID = (0.4, 0.55, 0.7, 0.85, 1.0, 1.2, 1.45, 1.75, 2.1)
# Offsets per grade tried against a human sample (the grader grades g as g + offset).
_OFFSET_GRID = tuple(x / 10 for x in range(-15, 16))
# Dirichlet pseudo-counts on the chain's start and steps: a pool with few probes is not read
# as certain, and a grade no query of the study holds keeps a little probability.
_START_PRIOR = 0.5
_STEP_PRIOR = 0.5
# How sure a human label is, as evidence on the chain: the order may put a document a person
# graded 2 among 3s, which a monotone chain can only explain as a small chance of error.
_HUMAN_CONFIDENCE = 0.9
_EM_ITERATIONS = 60
_EM_TOLERANCE = 1e-4
# Cells (queries x positions) of one block of the forward-backward pass.
_BLOCK_CELLS = 250_000
MAX_FIT_QUERIES = 2_000


@dataclass(frozen=True)
class ProbedOrder:
    """One query: ``length`` documents in the tournament's order, best first; ``probes``
    maps a position (0-based) to the grades the pointwise grader gave that document; ``human``
    holds, for a query a person labelled, their grade of each position (None for a document
    they did not grade), and is None for every other query."""

    length: int
    probes: Mapping[int, Sequence[int]] = field(default_factory=dict)
    human: Sequence[int | None] | None = None


@dataclass(frozen=True)
class GradeModel:
    """A fitted model: the chain's ``start`` (grade of the first document) and ``steps``
    (``steps[g, h]``: the next document has grade h given this one's g, zero for h > g), the
    ``emission`` (``emission[g, y]``: the grader says y of a document of grade g) and, when
    the emission is the parametric one, its ``noise``; ``offsets`` are the per-grade offsets a
    human sample gave (all 0 without one)."""

    start: FloatArray
    steps: FloatArray
    emission: FloatArray
    noise: float
    offsets: tuple[float, ...]
    log_likelihood: float

    def posteriors(self, orders: Sequence[ProbedOrder]) -> list[FloatArray]:
        """Per query, P(grade) at each position (length x GRADES)."""
        import numpy as np

        result: list[FloatArray] = [np.empty((0, GRADES))] * len(orders)
        for block in _blocks(orders):
            evidence = _evidence([orders[i] for i in block], self.emission)
            posterior, _, _ = _forward_backward(
                [orders[i].length for i in block], evidence, self.start, self.steps
            )
            for row, i in enumerate(block):
                result[i] = posterior[row, : orders[i].length]
        return result

    def grades(self, orders: Sequence[ProbedOrder]) -> list[list[int]]:
        """Per query, the posterior median grade of each position."""
        return [median_grades(posterior) for posterior in self.posteriors(orders)]

    def quantile_grades(self, orders: Sequence[ProbedOrder]) -> list[list[list[int]]]:
        """Per query, its grades at each of PREDICTION_QUANTILES of the posterior (one list of
        grades by position per quantile)."""
        return [
            [quantile_grades(posterior, q) for q in PREDICTION_QUANTILES]
            for posterior in self.posteriors(orders)
        ]


# The posterior quantiles whose label sets predict a measure: the mean of a distribution is
# the mean of its quantile function, so a document's grade averaged over these sets, and any
# sum of gains over them (a DCG, its ideal), approximates its posterior expectation without
# sampling; a measure's average over these comonotone sets approximates its own (it predicts
# a person's nDCG@10 of a query about a tenth better than the median labels do).
PREDICTION_QUANTILES = (0.1, 0.3, 0.5, 0.7, 0.9)


def median_grades(posterior: FloatArray) -> list[int]:
    """The posterior median grade of each row of P(grade)."""
    import numpy as np

    # at_least[:, g] = P(grade >= g)
    at_least = np.cumsum(posterior[:, ::-1], axis=1)[:, ::-1]
    return [int(x) for x in (at_least[:, 1:] >= 0.5).sum(axis=1)]


def quantile_grades(posterior: FloatArray, quantile: float) -> list[int]:
    """The grade at `quantile` of each row of P(grade): the smallest g with P(grade <= g) at
    least `quantile`."""
    import numpy as np

    at_most = np.cumsum(posterior, axis=1)
    return [int(x) for x in (at_most < quantile - 1e-12).sum(axis=1)]


def rounded_gaussian(noise: float, offsets: Sequence[float] = (0.0,) * GRADES) -> FloatArray:
    """emission[g, y]: P(round(g + offset_g + e) clamped to 0..GRADES-1 = y), e ~ N(0, noise²)."""
    import numpy as np

    def normal_cdf(x: float) -> float:
        return 0.5 * (1.0 + math.erf(x / (noise * math.sqrt(2.0))))

    emission = np.zeros((GRADES, GRADES))
    for grade in range(GRADES):
        centre = grade + offsets[grade]
        for probe in range(GRADES):
            upper = 1.0 if probe == GRADES - 1 else normal_cdf(probe + 0.5 - centre)
            lower = 0.0 if probe == 0 else normal_cdf(probe - 0.5 - centre)
            emission[grade, probe] = max(upper - lower, 1e-9)
    emission /= emission.sum(axis=1, keepdims=True)
    return emission


@dataclass(frozen=True)
class SampleEmission:
    """The emission fitted to a human sample: the grader's ``noise`` and its ``offsets``
    (one per human grade), from ``pairs`` (human grade, probe) pairs."""

    noise: float
    offsets: tuple[float, ...]
    pairs: int

    @property
    def matrix(self) -> FloatArray:
        return rounded_gaussian(self.noise, self.offsets)


def fit_sample_emission(pairs: Iterable[tuple[int, int]]) -> SampleEmission | None:
    """What the (human grade, probe) pairs of a human sample say of the grader: a rounded
    Gaussian with an offset per grade, or None when the sample shows no bias it can tell from
    noise.

    For each width the offsets are fitted grade by grade (the likelihood factors by grade),
    and the width with the best total is taken; a grade the sample never shows keeps offset 0.
    That model (1 + GRADES parameters) is kept only if it beats the unbiased one (the width
    alone) by the Bayesian information criterion: a dozen queries' probes of an unbiased
    grader would otherwise be read as biases that are noise, and make the labels worse.
    """
    import numpy as np

    counts = np.zeros((GRADES, GRADES))
    for human, probe in pairs:
        counts[human, probe] += 1
    total = counts.sum()
    if not total:
        return None
    unbiased = max(float((counts * np.log(rounded_gaussian(noise))).sum()) for noise in NOISE_GRID)
    best: tuple[float, float, tuple[float, ...]] | None = None
    for noise in NOISE_GRID:
        likelihood = 0.0
        offsets: list[float] = []
        for grade in range(GRADES):
            if not counts[grade].sum():
                offsets.append(0.0)
                continue
            scored = []
            for offset in _OFFSET_GRID:
                row = rounded_gaussian(noise, [offset] * GRADES)[grade]
                # Ties (a grade at an edge) go to the smallest offset: no evidence, no shift.
                scored.append((float(counts[grade] @ np.log(row)), -abs(offset), offset))
            grade_likelihood, _, offset = max(scored)
            likelihood += grade_likelihood
            offsets.append(offset)
        if best is None or likelihood > best[0]:
            best = (likelihood, noise, tuple(offsets))
    assert best is not None
    biased, width, fitted = best
    shown = sum(1 for grade in range(GRADES) if counts[grade].sum())
    if 2 * (biased - unbiased) <= shown * math.log(total):
        return None
    return SampleEmission(width, fitted, int(total))


def fit_grade_model(
    orders: Sequence[ProbedOrder],
    *,
    sample: SampleEmission | None = None,
    base: GradeModel | None = None,
    max_fit_queries: int = MAX_FIT_QUERIES,
    seed: int = 0,
) -> GradeModel:
    """The model that makes the probes (and human labels) of ``orders`` most likely.

    With ``sample`` the emission is the sample's; else with ``base`` (the same study's model
    fitted before, without human labels) its emission, and its chain as EM's starting point;
    else the grader's noise is the width of NOISE_GRID with the highest marginal likelihood.
    The chain is fitted by EM on at most ``max_fit_queries`` queries (a sample drawn with
    ``seed``; queries with human labels are always in it).
    """
    import numpy as np

    fitted = list(orders)
    if len(fitted) > max_fit_queries:
        labelled = [o for o in fitted if o.human is not None]
        others = [o for o in fitted if o.human is None]
        rng = np.random.default_rng(seed)
        keep = max(0, max_fit_queries - len(labelled))
        chosen = rng.choice(len(others), size=min(keep, len(others)), replace=False)
        fitted = labelled + [others[i] for i in sorted(chosen)]
    if sample is not None:
        emissions = [(sample.matrix, sample.noise, sample.offsets)]
    elif base is not None:
        emissions = [(base.emission, base.noise, base.offsets)]
    else:
        emissions = [(rounded_gaussian(n), n, (0.0,) * GRADES) for n in NOISE_GRID]
    chain = (base.start, base.steps) if base is not None else _initial_chain()
    best: GradeModel | None = None
    for emission, noise, offsets in emissions:
        start, steps, likelihood = _expectation_maximisation(fitted, emission, chain)
        if best is None or likelihood > best.log_likelihood:
            best = GradeModel(start, steps, emission, noise, offsets, likelihood)
    assert best is not None
    return best


def plan_probes(length: int, count: int, leverage: Sequence[float] | None = None) -> list[int]:
    """Which positions of an order of ``length`` to probe with ``count`` calls.

    Half (rounded up) are spread evenly along the order, first and last included: they tell
    the model where the grades change. The rest go to the documents with the most
    ``leverage`` (one value per position, e.g. how differently the compared systems rank the
    document in their top K: a document every system ranks alike cannot change a comparison),
    and when no document has any, again evenly into the largest gaps. Sorted, each at most once.
    """
    count = min(count, length)
    if count <= 0:
        return []
    chosen = set(_spread(length, (count + 1) // 2))
    if leverage is not None:
        ranked = sorted(
            (position for position in range(length) if leverage[position] > 0),
            key=lambda position: (-leverage[position], position),
        )
        for position in ranked:
            if len(chosen) >= count:
                break
            chosen.add(position)
    while len(chosen) < count:
        ordered = sorted(chosen)
        gaps = [(b - a, a) for a, b in zip([-1, *ordered], [*ordered, length], strict=True)]
        width, before = max(gaps)
        chosen.add(before + (width + 1) // 2 if before >= 0 else (width - 1) // 2)
    return sorted(chosen)


def _spread(length: int, count: int) -> list[int]:
    if count <= 0:
        return []
    if count == 1:
        return [0]
    return sorted({round(i * (length - 1) / (count - 1)) for i in range(count)})


# -- the forward-backward pass and EM ---------------------------------------------------------


def _initial_chain() -> tuple[FloatArray, FloatArray]:
    import numpy as np

    start = np.full(GRADES, 1.0 / GRADES)
    steps = np.tril(np.ones((GRADES, GRADES)))
    steps[np.diag_indices(GRADES)] = 10.0
    return start, steps / steps.sum(axis=1, keepdims=True)


def _expectation_maximisation(
    orders: Sequence[ProbedOrder], emission: FloatArray, chain: tuple[FloatArray, FloatArray]
) -> tuple[FloatArray, FloatArray, float]:
    import numpy as np

    start, steps = chain
    blocks = [
        ([orders[i].length for i in block], _evidence([orders[i] for i in block], emission))
        for block in _blocks(orders)
    ]
    allowed = np.tril(np.ones((GRADES, GRADES)))
    previous = -math.inf
    likelihood = 0.0
    for _ in range(_EM_ITERATIONS):
        first = np.full(GRADES, _START_PRIOR)
        moves = allowed * _STEP_PRIOR
        likelihood = 0.0
        for lengths, evidence in blocks:
            posterior, block_likelihood, block_moves = _forward_backward(
                lengths, evidence, start, steps
            )
            first += posterior[:, 0].sum(axis=0)
            moves += block_moves
            likelihood += block_likelihood
        start = first / first.sum()
        moves *= allowed
        steps = moves / moves.sum(axis=1, keepdims=True)
        if likelihood - previous < _EM_TOLERANCE:
            break
        previous = likelihood
    return start, steps, likelihood


def _blocks(orders: Sequence[ProbedOrder]) -> list[list[int]]:
    """Indices of `orders` in blocks of similar length, each under _BLOCK_CELLS cells."""
    by_length = sorted(range(len(orders)), key=lambda i: orders[i].length)
    blocks: list[list[int]] = []
    current: list[int] = []
    for i in by_length:
        longest = max(orders[i].length, 1)
        if current and (len(current) + 1) * longest > _BLOCK_CELLS:
            blocks.append(current)
            current = []
        current.append(i)
    if current:
        blocks.append(current)
    return blocks


def _evidence(orders: Sequence[ProbedOrder], emission: FloatArray) -> FloatArray:
    """evidence[q, t, g]: how likely what was seen at position t of query q is if its grade
    is g (1 where nothing was)."""
    import numpy as np

    longest = max((o.length for o in orders), default=0)
    evidence = np.ones((len(orders), max(longest, 1), GRADES))
    human_rows = np.full((GRADES, GRADES), (1 - _HUMAN_CONFIDENCE) / (GRADES - 1))
    human_rows[np.diag_indices(GRADES)] = _HUMAN_CONFIDENCE
    for row, order in enumerate(orders):
        for position, probes in order.probes.items():
            for probe in probes:
                evidence[row, position] *= emission[:, probe]
        if order.human is not None:
            for position, grade in enumerate(order.human):
                if grade is not None:
                    evidence[row, position] *= human_rows[grade]
    return evidence


def _forward_backward(
    lengths: Sequence[int], evidence: FloatArray, start: FloatArray, steps: FloatArray
) -> tuple[FloatArray, float, FloatArray]:
    """The scaled forward-backward pass over a block of queries (rows of `evidence`, each
    `lengths[row]` long): the posterior of every position's grade, the block's log
    likelihood, and the expected number of each step (grade g followed by grade h)."""
    import numpy as np

    queries, positions, _ = evidence.shape
    lengths_array = np.asarray(lengths)
    forward = np.empty_like(evidence)
    scale = np.ones((queries, positions))
    first = start[np.newaxis, :] * evidence[:, 0]
    scale[:, 0] = first.sum(axis=1)
    forward[:, 0] = first / scale[:, 0, np.newaxis]
    for t in range(1, positions):
        step = (forward[:, t - 1] @ steps) * evidence[:, t]
        live = t < lengths_array
        total = np.where(live, step.sum(axis=1), 1.0)
        scale[:, t] = total
        forward[:, t] = np.where(
            live[:, np.newaxis], step / total[:, np.newaxis], forward[:, t - 1]
        )
    backward = np.ones_like(evidence)
    for t in range(positions - 2, -1, -1):
        live = (t + 1) < lengths_array
        ahead = evidence[:, t + 1] * backward[:, t + 1]
        back = (ahead @ steps.T) / scale[:, t + 1, np.newaxis]
        backward[:, t] = np.where(live[:, np.newaxis], back, 1.0)
    # The expected steps, all at once: from the grade at t to the one at t + 1, over every
    # position with a next one (padding contributes nothing).
    has_next = (np.arange(positions - 1)[np.newaxis, :] + 1) < lengths_array[:, np.newaxis]
    here = forward[:, :-1] * has_next[:, :, np.newaxis]
    ahead = evidence[:, 1:] * backward[:, 1:] / scale[:, 1:, np.newaxis]
    moves = steps * np.einsum("qti,qtj->ij", here, ahead)
    posterior = forward * backward
    posterior /= posterior.sum(axis=2, keepdims=True)
    likelihood = float(np.log(scale).sum())
    return posterior, likelihood, moves
