"""Per-query measures as trec_eval defines them, plus a tie-aware nDCG.

Every function takes one query's ranking (document ids, best first, already in trec_eval order
and already cut by any ``-M``-style limit) and its judgments (docid -> grade). A document absent
from the judgments is unjudged and counts as grade 0. ``rel`` is the relevance threshold: a
document is relevant when its grade is >= rel (trec_eval's ``-l``).

A value is ``None`` (NA) when the measure is undefined for the query: the query has no relevant
document (nDCG: no document with a positive grade), or, for Judged, nothing was retrieved.
trec_eval reports 0 in those cases; :func:`tierank.evaluation.evaluate` can do the same.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping, Sequence


def _relevant_count(judgments: Mapping[str, int], rel: int) -> int:
    return sum(1 for grade in judgments.values() if grade >= rel)


def _is_relevant(docid: str, judgments: Mapping[str, int], rel: int) -> bool:
    return judgments.get(docid, 0) >= rel


def _discount(position: int) -> float:
    """log2(rank + 1) for a 0-based position."""
    return math.log2(position + 2)


def ideal_dcg(judgments: Mapping[str, int], cutoff: int | None) -> float:
    """The DCG of the ideal ranking: every judged document with a positive grade, best first."""
    gains = sorted((grade for grade in judgments.values() if grade > 0), reverse=True)
    return sum(gain / _discount(i) for i, gain in enumerate(gains[:cutoff]))


def ndcg(
    ranking: Sequence[str], judgments: Mapping[str, int], cutoff: int | None = None
) -> float | None:
    """trec_eval ``ndcg`` / ``ndcg_cut``: linear gain, log2(rank+1) discount.

    Negative grades add no gain (trec_eval's default gains are the positive grades).
    """
    ideal = ideal_dcg(judgments, cutoff)
    if ideal == 0:
        return None
    gained = (max(judgments.get(docid, 0), 0) for docid in ranking[:cutoff])
    return sum(gain / _discount(i) for i, gain in enumerate(gained)) / ideal


def tie_aware_ndcg(
    tiers: Sequence[Collection[str]], judgments: Mapping[str, int], cutoff: int | None = None
) -> float | None:
    """nDCG averaged over every order of the documents inside each tier.

    By linearity of expectation each position a tier occupies receives the tier's mean gain
    (McSherry & Najork, ECIR 2008), so no enumeration of orders is needed. A tier that straddles
    the cutoff contributes only the positions inside it. Gains and ideal are as in :func:`ndcg`.
    """
    ideal = ideal_dcg(judgments, cutoff)
    if ideal == 0:
        return None
    total = 0.0
    start = 0
    for tier in tiers:
        if not tier:
            continue
        mean_gain = sum(max(judgments.get(docid, 0), 0) for docid in tier) / len(tier)
        end = start + len(tier) if cutoff is None else min(start + len(tier), cutoff)
        total += mean_gain * sum(1 / _discount(i) for i in range(start, end))
        start += len(tier)
        if cutoff is not None and start >= cutoff:
            break
    return total / ideal


def reciprocal_rank(
    ranking: Sequence[str], judgments: Mapping[str, int], rel: int = 1, cutoff: int | None = None
) -> float | None:
    if _relevant_count(judgments, rel) == 0:
        return None
    for i, docid in enumerate(ranking[:cutoff]):
        if _is_relevant(docid, judgments, rel):
            return 1 / (i + 1)
    return 0.0


def precision(
    ranking: Sequence[str], judgments: Mapping[str, int], cutoff: int, rel: int = 1
) -> float:
    """Relevant documents in the top ``cutoff`` over ``cutoff``, even if fewer were returned."""
    return sum(_is_relevant(d, judgments, rel) for d in ranking[:cutoff]) / cutoff


def recall(
    ranking: Sequence[str], judgments: Mapping[str, int], rel: int = 1, cutoff: int | None = None
) -> float | None:
    relevant = _relevant_count(judgments, rel)
    if relevant == 0:
        return None
    return sum(_is_relevant(d, judgments, rel) for d in ranking[:cutoff]) / relevant


def average_precision(
    ranking: Sequence[str], judgments: Mapping[str, int], rel: int = 1, cutoff: int | None = None
) -> float | None:
    """trec_eval ``map`` (and ``map_cut`` with a cutoff): divided by all relevant documents."""
    relevant = _relevant_count(judgments, rel)
    if relevant == 0:
        return None
    found = 0
    total = 0.0
    for i, docid in enumerate(ranking[:cutoff]):
        if _is_relevant(docid, judgments, rel):
            found += 1
            total += found / (i + 1)
    return total / relevant


def r_precision(ranking: Sequence[str], judgments: Mapping[str, int], rel: int = 1) -> float | None:
    """Precision at R, the number of relevant documents (trec_eval ``Rprec``)."""
    relevant = _relevant_count(judgments, rel)
    if relevant == 0:
        return None
    return precision(ranking, judgments, relevant, rel)


def success(
    ranking: Sequence[str], judgments: Mapping[str, int], cutoff: int, rel: int = 1
) -> float | None:
    """1 if a relevant document is in the top ``cutoff``, else 0 (trec_eval ``success``)."""
    if _relevant_count(judgments, rel) == 0:
        return None
    return float(any(_is_relevant(d, judgments, rel) for d in ranking[:cutoff]))


def judged(
    ranking: Sequence[str], judgments: Mapping[str, int], cutoff: int | None = None
) -> float | None:
    """Share of the top ``cutoff`` that is judged (any grade), over the documents present.

    As in ir-measures' ``Judged@K``: the denominator is min(cutoff, documents retrieved).
    """
    top = ranking[:cutoff]
    if not top:
        return None
    return sum(docid in judgments for docid in top) / len(top)
