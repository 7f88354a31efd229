"""What a judge's answers on human-labelled batches say about it: pair accuracy, position bias,
self-consistency and transitivity of its listwise orderings, agreement of its pointwise grades,
and the verdict and ensemble weight that follow. Pure: answers in, messages out.

Every share comes with a 95% Wilson score interval. The listwise shares count pairs, calls or
triples, but the unit that was sampled is the query: the pairs of one ordering are strongly
correlated (a judge that returns the shown order of a random shuffle gets whole runs of pairs
right or wrong together), so treating them as independent trials makes the interval far too
narrow, and would call a judge at chance usable more than one time in ten. Their intervals are
therefore taken at the effective number of trials, the count divided by the design effect
estimated from the spread between queries.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from itertools import combinations
from statistics import NormalDist

from tierank.evaluation.agreement import cohen_kappa, confusion_matrix
from tierank.evaluation.transitivity import non_transitivity
from tierank.v1 import eval_pb2

# Accuracy is clipped before taking log-odds: below 0.5 a judge would get a negative weight
# (its votes inverted), which one small qualification cannot justify, and at 1 the weight is
# infinite and would silence every other judge.
_ACCURACY_FOR_WEIGHT = (0.5, 0.99)
# A position ranked first this many times more often than chance is worth telling the user.
_STRONG_BIAS = 2.0
# Answers that repeat (or reverse) the whole shown order at least this often, by the interval's
# low end, are worth telling the user: by chance a complete ranking of k >= 3 does it in at most
# 1/6 of calls, and less than 1% from k = 6.
_FOLLOWS_ORDER = 0.2
# A judge whose answers start with one shown position, or repeat or reverse the shown order, in
# more than this share of its answers (by the interval's low end) is not usable whatever its
# pair accuracy: the top of its rankings is a position, not a passage. Real small models do
# this (Qwen2.5-Coder-1.5B put the fifth-shown passage first in nearly every answer at k=5)
# while their other pairs keep enough signal to lift pair accuracy past chance.
_POSITION_RULES = 0.5
# The grades a pointwise grader answers with; a confusion matrix always shows all of them.
_GRADE_SCALE = (0, 3)


@dataclass(frozen=True)
class ListwiseAnswer:
    """One listwise call: the batch as shown and the judge's ordering of it, best first.

    ``ranked`` may name only some of ``shown`` (a partial answer) and is empty when the call
    failed or its reply could not be read.
    """

    query_id: str
    batch_id: int
    shuffle: int
    shown: tuple[str, ...]
    ranked: tuple[str, ...]
    failed: bool

    def __post_init__(self) -> None:
        # A ranked id that was not shown has no position and would invent pairs: a parser bug.
        if not set(self.ranked) <= set(self.shown):
            raise ValueError(f"ranked {self.ranked!r} names documents not shown {self.shown!r}")
        if len(set(self.ranked)) != len(self.ranked):
            raise ValueError(f"ranked {self.ranked!r} names a document twice")
        if self.failed and self.ranked:
            raise ValueError("a failed call has no ranking")

    @property
    def answered(self) -> bool:
        return not self.failed and bool(self.ranked)

    @property
    def complete(self) -> bool:
        """Whether the ranking orders every shown document."""
        return self.answered and len(self.ranked) == len(self.shown)


def proportion(successes: int, total: int) -> eval_pb2.Proportion:
    """``successes`` of ``total`` independent trials with its 95% Wilson score interval, which
    stays inside [0, 1] and keeps its coverage near 0, near 1 and for small totals, where the
    normal approximation fails. No trials: value 0 and the uninformative interval [0, 1]."""
    if not 0 <= successes <= total:
        raise ValueError(f"need 0 <= successes <= total, got {successes} of {total}")
    return _wilson(successes, total, total)


def clustered_proportion(
    clusters: Iterable[tuple[int, int]], confidence: float = 0.95
) -> eval_pb2.Proportion:
    """The share of successes over (successes, trials) clusters whose trials are not
    independent within a cluster, with the Wilson interval at the effective number of trials.

    The design effect is the cluster-robust variance of the share (a ratio estimator over
    clusters) over the variance independent trials would have; it is never taken below 1, so
    the interval is never narrower than :func:`proportion`'s. With one cluster there is no
    spread to estimate and the trials are taken as independent.
    """
    counted = [(s, t) for s, t in clusters if t]
    if any(not 0 <= s <= t for s, t in counted):
        raise ValueError(f"need 0 <= successes <= trials in every cluster, got {counted}")
    successes = sum(s for s, _ in counted)
    total = sum(t for _, t in counted)
    share = successes / total if total else 0.0
    effective = float(total)
    if len(counted) > 1 and 0 < share < 1:
        spread = math.fsum((s - share * t) ** 2 for s, t in counted)
        variance = len(counted) / (len(counted) - 1) * spread / total**2
        design_effect = variance / (share * (1 - share) / total)
        effective = total / max(design_effect, 1.0)
    return _wilson(successes, total, effective, confidence)


def _wilson(
    successes: int, total: int, effective: float, confidence: float = 0.95
) -> eval_pb2.Proportion:
    if total == 0:
        return eval_pb2.Proportion(value=0.0, low=0.0, high=1.0, count=0, total=0)
    z = NormalDist().inv_cdf((1 + confidence) / 2)
    share = successes / total
    spread = z * z / effective
    centre = (share + spread / 2) / (1 + spread)
    half = z * math.sqrt(share * (1 - share) / effective + spread / (4 * effective)) / (1 + spread)
    return eval_pb2.Proportion(
        value=share,
        low=max(0.0, centre - half),
        high=min(1.0, centre + half),
        count=successes,
        total=total,
    )


def _ordered_pairs(ranked: Sequence[str]) -> Iterable[tuple[str, str]]:
    """(better, worse) for every pair of ranked documents.

    Only pairs the answer names: an unranked document is not taken to lose to a ranked one,
    as the scheduler adds only the pairs a partial verdict states."""
    return combinations(ranked, 2)


class _PerQuery:
    """Successes and trials of one share, kept per query so the interval can see how they
    spread between queries."""

    def __init__(self) -> None:
        self._counts: dict[str, list[int]] = defaultdict(lambda: [0, 0])

    def add(self, query_id: str, success: bool) -> None:
        counts = self._counts[query_id]
        counts[0] += success
        counts[1] += 1

    def share(self, confidence: float = 0.95) -> eval_pb2.Proportion:
        return clustered_proportion(((s, t) for s, t in self._counts.values()), confidence)


def listwise_quality(
    answers: Sequence[ListwiseAnswer],
    grades: Mapping[str, Mapping[str, int]],
    batch_size: int,
) -> eval_pb2.ListwiseQuality:
    """Listwise figures over every answered call; failed calls count nowhere (their failure
    is in the cost figures). ``grades``: query id -> document id -> human grade."""
    if batch_size < 1:
        raise ValueError(f"batch size must be positive, got {batch_size}")
    answered = [a for a in answers if a.answered]
    pairs, by_gap = _pair_accuracy(answered, grades)
    repeats, reverses = _PerQuery(), _PerQuery()
    for answer in answered:
        if answer.complete:
            repeats.add(answer.query_id, answer.ranked == answer.shown)
            reverses.add(answer.query_id, answer.ranked == answer.shown[::-1])
    return eval_pb2.ListwiseQuality(
        batch_size=batch_size,
        pair_accuracy=pairs,
        by_gap=by_gap,
        first_position=_first_position(answered, batch_size),
        repeats_shown_order=repeats.share(),
        reverses_shown_order=reverses.share(),
        self_consistency=_self_consistency(answered),
        cyclic_triples=_cyclic_triples(answered),
    )


def _pair_accuracy(
    answered: Sequence[ListwiseAnswer], grades: Mapping[str, Mapping[str, int]]
) -> tuple[eval_pb2.Proportion, list[eval_pb2.GapAccuracy]]:
    """Ranked pairs the humans grade differently, and how many the judge put in their order."""
    overall = _PerQuery()
    by_gap: dict[int, _PerQuery] = defaultdict(_PerQuery)
    for answer in answered:
        graded = grades.get(answer.query_id, {})
        for better, worse in _ordered_pairs(answer.ranked):
            if better not in graded or worse not in graded:
                continue
            difference = graded[better] - graded[worse]
            if difference == 0:
                continue
            overall.add(answer.query_id, difference > 0)
            by_gap[abs(difference)].add(answer.query_id, difference > 0)
    return overall.share(), [
        eval_pb2.GapAccuracy(gap=gap, accuracy=by_gap[gap].share()) for gap in sorted(by_gap)
    ]


def _first_position(
    answered: Sequence[ListwiseAnswer], batch_size: int
) -> list[eval_pb2.PositionShare]:
    """How often each shown position was ranked first. Only full-size batches count: in a
    smaller one, position i has a different chance and would blur the comparison.

    The intervals hold for all positions at once (Bonferroni): with one 95% interval per
    position, an unbiased judge would show some position "above chance" in a quarter of
    qualifications at a batch size of 12."""
    full = [a for a in answered if len(a.shown) == batch_size]
    shares = []
    for index in range(batch_size):
        first_here = _PerQuery()
        for answer in full:
            first_here.add(answer.query_id, answer.ranked[0] == answer.shown[index])
        shares.append(
            eval_pb2.PositionShare(
                position=index + 1,
                ranked_first=first_here.share(1 - 0.05 / batch_size),
                chance=1 / batch_size,
            )
        )
    return shares


def _self_consistency(answered: Sequence[ListwiseAnswer]) -> eval_pb2.Proportion:
    """For every two shuffles of one batch, the pairs both ranked that they order alike."""
    shuffles: dict[tuple[str, int], list[ListwiseAnswer]] = defaultdict(list)
    for answer in answered:
        shuffles[(answer.query_id, answer.batch_id)].append(answer)
    agreement = _PerQuery()
    for (query_id, _), same_batch in shuffles.items():
        for one, other in combinations(same_batch, 2):
            rank_one = {doc: i for i, doc in enumerate(one.ranked)}
            rank_other = {doc: i for i, doc in enumerate(other.ranked)}
            both = [doc for doc in one.ranked if doc in rank_other]
            for a, b in combinations(both, 2):
                agreement.add(
                    query_id, (rank_one[a] < rank_one[b]) == (rank_other[a] < rank_other[b])
                )
    return agreement.share()


def _cyclic_triples(answered: Sequence[ListwiseAnswer]) -> eval_pb2.Proportion:
    """Per query, the majority direction of each pair over all its answers (tied pairs left
    out, as the scheduler's majority graph has no edge for them), then the triples of
    directed pairs that form a cycle: the judge contradicting itself across calls."""
    votes: dict[str, dict[tuple[str, str], int]] = defaultdict(lambda: defaultdict(int))
    for answer in answered:
        for better, worse in _ordered_pairs(answer.ranked):
            votes[answer.query_id][(better, worse)] += 1
    per_query = []
    for tally in votes.values():
        majority = {(a, b): 1 for (a, b), count in tally.items() if count > tally.get((b, a), 0)}
        counted = non_transitivity(majority)
        per_query.append((counted.cyclic, counted.judged))
    return clustered_proportion(per_query)


def pointwise_quality(
    pairs: Sequence[tuple[int, int]], threshold: int
) -> eval_pb2.PointwiseQuality:
    """Agreement of pointwise grades with the human ones: ``pairs`` of (human, judge) grade.

    The confusion matrix has human grades as rows and the judge's as columns, over every
    grade from 0 to 3 (wider if either side used others), so that weighted κ costs a
    disagreement by the grades' distance even where a grade went unused. Precision and recall
    treat grade >= ``threshold`` as relevant; F1 is unset when neither side found anything
    relevant, where it says nothing.
    """
    human = [h for h, _ in pairs]
    judge = [j for _, j in pairs]
    used = {*_GRADE_SCALE, *human, *judge}
    scale = list(range(min(used), max(used) + 1))
    matrix = confusion_matrix(human, judge, scale)
    both = sum(h >= threshold and j >= threshold for h, j in pairs)
    judge_relevant = sum(j >= threshold for j in judge)
    human_relevant = sum(h >= threshold for h in human)
    missed_or_false = judge_relevant + human_relevant - 2 * both
    return eval_pb2.PointwiseQuality(
        relevance_threshold=threshold,
        confusion=eval_pb2.ConfusionMatrix(
            grades=scale, rows=[eval_pb2.ConfusionRow(counts=row) for row in matrix.counts]
        ),
        linear_weighted_kappa=cohen_kappa(human, judge, "linear", scale),
        quadratic_weighted_kappa=cohen_kappa(human, judge, "quadratic", scale),
        precision=proportion(both, judge_relevant),
        recall=proportion(both, human_relevant),
        f1=2 * both / (2 * both + missed_or_false) if both or missed_or_false else None,
    )


def judge_verdict(listwise: eval_pb2.ListwiseQuality) -> tuple[bool, float, str]:
    """(usable, weight, one plain line) from a judge's listwise figures.

    Usable when pair accuracy's interval lies above 0.5: the judge orders pairs better than a
    coin. Its weight is the log-odds of its pair accuracy, the optimal weight of a voter in a
    weighted majority of independent voters (Nitzan and Paroush, 1982); 0 when not usable.
    """
    accuracy = listwise.pair_accuracy
    if accuracy.total == 0:
        anything = any(p.ranked_first.total for p in listwise.first_position)
        reason = "no answer ranked two passages graded differently" if anything else "no answers"
        return False, 0.0, f"not usable: {reason}"
    figure = f"pair accuracy {_share_with_interval(accuracy)}"
    if accuracy.low <= 0.5:
        below = " below" if accuracy.high < 0.5 else ""
        return False, 0.0, f"not usable: {figure} is{below} chance{_position_bias(listwise)}"
    if _positions_rule(listwise):
        return (
            False,
            0.0,
            f"not usable: its answers follow the shown positions ({figure}"
            f"{_position_bias(listwise)})",
        )
    clipped = min(max(accuracy.value, _ACCURACY_FOR_WEIGHT[0]), _ACCURACY_FOR_WEIGHT[1])
    weight = math.log(clipped / (1 - clipped))
    return True, weight, f"usable: {figure}{_position_bias(listwise)}"


def _positions_rule(listwise: eval_pb2.ListwiseQuality) -> bool:
    """Whether one shown position, or the shown order itself, decides most answers."""
    picked = any(p.ranked_first.low > _POSITION_RULES for p in listwise.first_position)
    ordered = listwise.batch_size > 2 and any(
        share.total and share.low > _POSITION_RULES
        for share in (listwise.repeats_shown_order, listwise.reverses_shown_order)
    )
    return picked or ordered


def _share_with_interval(share: eval_pb2.Proportion) -> str:
    return f"{share.value:.2f} [{share.low:.2f}, {share.high:.2f}]"


def _position_bias(listwise: eval_pb2.ListwiseQuality) -> str:
    """A note on position bias, empty when none is clear: the most favoured position when it is
    ranked first far more often than chance and its interval says this is not luck, and answers
    that repeat or reverse the whole shown order often."""
    notes = []
    strong = [
        p
        for p in listwise.first_position
        if p.ranked_first.value > _STRONG_BIAS * p.chance and p.ranked_first.low > p.chance
    ]
    if strong:
        worst = max(strong, key=lambda p: p.ranked_first.value)
        notes.append(
            f"position {worst.position} ranked first "
            f"{worst.ranked_first.value:.0%} (chance {worst.chance:.0%})"
        )
    for share, what in (
        (listwise.repeats_shown_order, "repeats"),
        (listwise.reverses_shown_order, "reverses"),
    ):
        # Of two passages, every complete answer repeats or reverses the shown order.
        if listwise.batch_size > 2 and share.total and share.low >= _FOLLOWS_ORDER:
            notes.append(f"{what} the shown order in {share.value:.0%} of answers")
    return f"; position bias: {', '.join(notes)}" if notes else ""
