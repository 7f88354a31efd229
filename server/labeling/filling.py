"""Filling qrels holes: which pairs of the runs' tops to grade, and how far to trust the grades.

A hole is an unjudged (query, document) pair in the top of some run. The filled grades come with
evidence: held-in pairs, human-judged pairs drawn from the same tops and graded by the same
judge in the same request, measure how the judge agrees with the labels it fills beside, on
documents like the ones it fills (the tops of these runs, not the whole pool). Held-in grades
are reported, never written to the qrels.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence

from tierank.evaluation import Qrels, Run, cohen_kappa, rank_documents
from tierank.limits import DEFAULT_RELEVANCE_THRESHOLD
from tierank.server.labeling.qualify_stats import pointwise_quality, proportion
from tierank.v1 import eval_pb2

# TREC DL's convention (and the UMBRELA scale's): grades 2 and 3 are relevant.
RELEVANCE_THRESHOLD = DEFAULT_RELEVANCE_THRESHOLD

QueryDoc = tuple[str, str]


def run_tops(runs: Sequence[tuple[str, Run]], depth: int) -> list[QueryDoc]:
    """Every (query, document) in the top `depth` of any run, first seen first."""
    tops: dict[QueryDoc, None] = {}
    for _, run in runs:
        for qid, scores in run.items():
            for docid in rank_documents(scores)[:depth]:
                tops.setdefault((qid, docid))
    return list(tops)


def unjudged(qrels: Qrels, pairs: Sequence[QueryDoc]) -> list[QueryDoc]:
    return [(q, d) for q, d in pairs if d not in qrels.get(q, {})]


def held_in_sample(
    qrels: Qrels,
    pairs: Sequence[QueryDoc],
    size: int,
    seed: int,
    gradable: Callable[[str, str], bool],
) -> list[QueryDoc]:
    """Up to `size` judged pairs among `pairs` that the judge can be shown (`gradable`: their
    texts were sent), drawn by `seed`, in their order in `pairs`.

    The sample is a prefix of one seeded shuffle, so a larger size only adds pairs. Judged
    pairs without texts are passed over rather than refused: the sample is evidence about the
    judge, and a qrels file routinely judges more documents than a passage file holds."""
    candidates = [(q, d) for q, d in pairs if d in qrels.get(q, {}) and gradable(q, d)]
    order = list(range(len(candidates)))
    random.Random(seed).shuffle(order)
    return [candidates[i] for i in sorted(order[:size])]


def held_in_agreement(
    human: Sequence[int], judged: Sequence[int | None]
) -> eval_pb2.HeldInAgreement:
    """Agreement of the judge's grades with the human ones, pair by pair; a pair the judge
    failed to grade (None) is left out, as it is left out of the filled qrels."""
    pairs = [(h, j) for h, j in zip(human, judged, strict=True) if j is not None]
    if not pairs:
        return eval_pb2.HeldInAgreement(pairs=0)
    # The confusion matrix and weighted kappa as `tierank qualify` reports them for graders.
    quality = pointwise_quality(pairs, RELEVANCE_THRESHOLD)
    same_side = sum((h >= RELEVANCE_THRESHOLD) == (j >= RELEVANCE_THRESHOLD) for h, j in pairs)
    return eval_pb2.HeldInAgreement(
        pairs=len(pairs),
        kappa=cohen_kappa(
            [h for h, _ in pairs], [j for _, j in pairs], categories=quality.confusion.grades
        ),
        quadratic_weighted_kappa=(
            quality.quadratic_weighted_kappa
            if quality.HasField("quadratic_weighted_kappa")
            else None
        ),
        binary_agreement=proportion(same_side, len(pairs)),
        confusion=quality.confusion,
    )
