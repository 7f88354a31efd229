"""Score a run against qrels: per-query values and macro averages, with NA made explicit."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from tierank.evaluation import trec_measures
from tierank.evaluation.measures import Family, Measure, as_measure
from tierank.evaluation.ordering import rank_documents, tiers_from_scores
from tierank.evaluation.set_measures import (
    TREC_DL_SCALE,
    GradeScale,
    SetParams,
    SetScores,
    set_scores,
)


@dataclass(frozen=True)
class Aggregate:
    """Macro average of one measure: ``mean`` over the ``count`` queries with a value (None if
    none had one) and ``na``, the number of queries where the measure was NA."""

    mean: float | None
    count: int
    na: int


@dataclass(frozen=True)
class Evaluation:
    """``per_query[measure][qid]`` is a value or None (NA); ``aggregate[measure]`` the average."""

    per_query: dict[Measure, dict[str, float | None]]
    aggregate: dict[Measure, Aggregate]


def evaluate(
    measures: Iterable[str | Measure],
    qrels: Mapping[str, Mapping[str, int]],
    run: Mapping[str, Mapping[str, float]],
    *,
    all_queries: bool = False,
    max_docs: int | None = None,
    na_as_zero: bool = False,
    scale: GradeScale = TREC_DL_SCALE,
) -> Evaluation:
    """Evaluate ``run`` with each measure.

    - Queries: those in both run and qrels (trec_eval's default); with ``all_queries`` every
      query of the qrels, a query missing from the run being scored as an empty ranking
      (trec_eval ``-c``).
    - ``max_docs`` keeps only each query's top documents (trec_eval ``-M``).
    - Documents are ordered as trec_eval orders them (:mod:`tierank.evaluation.ordering`).
    - NA (e.g. AP for a query without relevant documents) is None per query and is skipped by
      the average; ``na_as_zero`` scores it 0 instead, as trec_eval does.
    - Set-based measures (RA-nWG, ...) map grades onto 1–5 with ``scale``; S_K is the top K of
      the ranking and the retrieval pool P is the whole (cut) ranking.
    """
    parsed = [as_measure(m) for m in measures]
    qids = sorted(qrels) if all_queries else sorted(set(qrels) & set(run))
    per_query: dict[Measure, dict[str, float | None]] = {m: {} for m in parsed}
    for qid in qids:
        scores = run.get(qid, {})
        ranking = rank_documents(scores)[:max_docs]
        judgments = qrels[qid]
        for measure in parsed:
            if measure.name == "nDCG" and measure.param("ties"):
                tiers = tiers_from_scores({docid: scores[docid] for docid in ranking})
                value = trec_measures.tie_aware_ndcg(tiers, judgments, measure.cutoff)
            else:
                value = _score(measure, ranking, judgments, scale)
            per_query[measure][qid] = 0.0 if value is None and na_as_zero else value
    return Evaluation(per_query, {m: _average(per_query[m].values()) for m in parsed})


def _average(values: Iterable[float | None]) -> Aggregate:
    listed = list(values)
    present = [v for v in listed if v is not None]
    mean = sum(present) / len(present) if present else None
    return Aggregate(mean, len(present), len(listed) - len(present))


def _score(
    measure: Measure, ranking: Sequence[str], judgments: Mapping[str, int], scale: GradeScale
) -> float | None:
    if measure.family is Family.SET:
        return _set_score(measure, ranking, judgments, scale)
    k = measure.cutoff
    match measure.name:
        case "nDCG":
            return trec_measures.ndcg(ranking, judgments, k)
        case "RR":
            return trec_measures.reciprocal_rank(ranking, judgments, measure.rel, k)
        case "P":
            return trec_measures.precision(ranking, judgments, measure.required_cutoff, measure.rel)
        case "R":
            return trec_measures.recall(ranking, judgments, measure.rel, k)
        case "AP":
            return trec_measures.average_precision(ranking, judgments, measure.rel, k)
        case "Rprec":
            return trec_measures.r_precision(ranking, judgments, measure.rel)
        case "Success":
            return trec_measures.success(ranking, judgments, measure.required_cutoff, measure.rel)
        case "Judged":
            return trec_measures.judged(ranking, judgments, k)
    raise AssertionError(f"no implementation for {measure}")


_SET_FIELDS: dict[str, str] = {
    "RA-nWG": "ra_nwg",
    "PROC": "proc",
    "%PROC": "pct_proc",
    "N-Recall4+": "n_recall_4plus",
    "N-Recall5": "n_recall_5",
    "Precision4+": "precision_4plus",
    "Harm": "harm",
}


def _set_score(
    measure: Measure, ranking: Sequence[str], judgments: Mapping[str, int], scale: GradeScale
) -> float | None:
    # The weighted measures take all three weights (defaults filled in), the others none.
    weights = SetParams()
    if measure.params:
        weights = SetParams(
            alpha=measure.param("alpha"), cap4=measure.param("cap4"), cap3=measure.param("cap3")
        )
    pool = {docid: scale.utility(grade) for docid, grade in judgments.items()}
    scores: SetScores = set_scores(
        pool, ranking, measure.required_cutoff, ranking, weights, scale.unjudged_utility
    )
    score: float | None = getattr(scores, _SET_FIELDS[measure.name])
    return score
