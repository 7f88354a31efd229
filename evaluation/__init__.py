"""Offline evaluation: score runs against labels, compare label sets, turn tiers into labels.

Pure Python (numpy for resampling), no server imports; the only I/O is reading and writing the
files passed in.

Files (:mod:`.formats`)
    ``read_qrels(path) -> Qrels`` / ``parse_qrels(lines, source)`` / ``write_qrels(path, qrels)``
    ``read_run(path) -> Run`` / ``parse_run(lines, source)`` / ``write_run(path, run, tag)``
    ``read_candidates(path) -> list[Candidate]`` / ``parse_candidates`` (``parse_candidate``: one
    line) / ``write_candidates``
    ``Qrels = dict[qid, dict[docid, grade]]``, ``Run = dict[qid, dict[docid, score]]``.
    Bad input raises ``FormatError`` (a ``ValueError``) naming the file and line.

Ordering (:mod:`.ordering`)
    ``rank_documents(scores)``: trec_eval's order, score descending then docid descending.
    ``tiers_from_scores(scores)``: equal scores grouped into tiers.

Scoring a run (:mod:`.measures`, :mod:`.scoring`)
    ``parse_measure("RR(rel=2)@10") -> Measure``; ``MeasureError`` for unknown names or K <= 0.
    ``evaluate(measures, qrels, run, *, all_queries=False, max_docs=None, na_as_zero=False,
    scale=TREC_DL_SCALE) -> Evaluation`` with ``per_query[measure][qid]`` (None = NA) and
    ``aggregate[measure] = Aggregate(mean, count, na)``. ``all_queries`` and ``max_docs`` are
    trec_eval's ``-c`` and ``-M``; ``na_as_zero`` reproduces trec_eval's averages exactly.
    Per-query functions live in :mod:`.trec_measures`, including
    ``tie_aware_ndcg(tiers, judgments, cutoff)``.

Set-based measures (:mod:`.set_measures`, ../shared/METRICS.md)
    ``set_scores(pool_utilities, selected, k, retrieved, params, unjudged_utility) -> SetScores``
    ``utility_weights(pool_utilities, params)``; ``SetParams``; ``GradeScale`` with defaults
    ``TREC_DL_SCALE`` (0–3), ``GRADED_0_4_SCALE`` (0–4), ``UTILITY_SCALE`` (1–5).

Agreement (:mod:`.agreement`, :mod:`.correlation`, :mod:`.transitivity`)
    ``confusion_matrix``, ``cohen_kappa(a, b, weights=None|"linear"|"quadratic")``,
    ``binary_kappa(a, b, threshold)``; ``kendall_tau_b``, ``spearman_rho``,
    ``rank_biased_overlap(a, b, p=0.9) -> RankBiasedOverlap(lower_bound, extrapolated)``
    (``.value`` is the extrapolated form); ``non_transitivity(votes) -> NonTransitivity``,
    ``preferences_from_outcomes(outcomes)``.

Studies: pooling, comparison, results (:mod:`.pooling`, :mod:`.comparison`, :mod:`.study_results`)
    ``pool_runs(runs, depth) -> {qid: [PooledDocument(docid, retrieved_by)]}`` (TREC pooling,
    in pool order); ``pool_additions(pooled, run, system, depth) -> PoolAdditions(system,
    added, updated)`` and its ``.merged_into(pooled)``; ``judged_share(run, judged, queries)``
    (Judged@10 of a run against the documents a pool judged).
    ``bootstrap_interval(values) -> Interval(mean, low, high)``; ``paired_test(a, b) ->
    PairedTest(difference, low, high, p_value, count)``; ``compare_systems(per_query) ->
    SystemComparison(intervals, ranking, adjacent: [AdjacentComparison])``;
    ``system_intervals(per_query)``; ``rank_by_mean(means)``; ``mean_over_queries(values)``.
    ``study_results(labels, runs, measures, primary=, human=) -> StudyResults(...,
    systems: [SystemResults], ranking, comparisons, per_query, agreement: Agreement | None)``;
    the same query by query: ``StudyTally(measures, systems=, primary=, with_human=)``,
    ``.add(qid, labels, runs, human)``, ``.results()``.

Labels from tiers (:mod:`.tier_labels`)
    ``labels_from_rank_bands(tiers, bands, below, position)``,
    ``labels_from_grade_levels(tiers, levels, lowest)``,
    ``anchor_tier_grades(num_tiers, grade_of) -> AnchoredGrades(grades, calls, anchors, ...)``.
"""

from tierank.evaluation.agreement import (
    ConfusionMatrix,
    binary_kappa,
    cohen_kappa,
    confusion_matrix,
)
from tierank.evaluation.comparison import (
    Interval,
    PairComparison,
    PairedTest,
    SystemComparison,
    bootstrap_interval,
    compare_systems,
    mean_over_queries,
    paired_test,
    rank_by_mean,
    system_intervals,
)
from tierank.evaluation.correlation import (
    RankBiasedOverlap,
    kendall_tau_b,
    rank_biased_overlap,
    spearman_rho,
)
from tierank.evaluation.formats import (
    Candidate,
    FormatError,
    Qrels,
    Run,
    format_qrels,
    parse_candidate,
    parse_candidates,
    parse_qrels,
    parse_run,
    read_candidates,
    read_qrels,
    read_run,
    write_candidates,
    write_qrels,
    write_run,
)
from tierank.evaluation.measures import MEASURE_NAMES, Measure, MeasureError, parse_measure
from tierank.evaluation.ordering import rank_documents, tiers_from_scores
from tierank.evaluation.pooling import (
    PoolAdditions,
    PooledDocument,
    judged_share,
    pool_additions,
    pool_runs,
)
from tierank.evaluation.scoring import Aggregate, Evaluation, evaluate
from tierank.evaluation.set_measures import (
    GRADED_0_4_SCALE,
    TREC_DL_SCALE,
    UTILITY_SCALE,
    GradeScale,
    SetParams,
    SetScores,
    set_scores,
    utility_weights,
)
from tierank.evaluation.study_results import (
    Agreement,
    StudyResults,
    StudyTally,
    SystemResults,
    study_results,
)
from tierank.evaluation.tier_labels import (
    AnchoredGrades,
    anchor_tier_grades,
    labels_from_grade_levels,
    labels_from_rank_bands,
)
from tierank.evaluation.transitivity import (
    NonTransitivity,
    non_transitivity,
    preferences_from_outcomes,
)
from tierank.evaluation.trec_measures import tie_aware_ndcg

__all__ = [
    "GRADED_0_4_SCALE",
    "MEASURE_NAMES",
    "TREC_DL_SCALE",
    "UTILITY_SCALE",
    "Aggregate",
    "Agreement",
    "AnchoredGrades",
    "Candidate",
    "ConfusionMatrix",
    "Evaluation",
    "FormatError",
    "GradeScale",
    "Interval",
    "Measure",
    "MeasureError",
    "NonTransitivity",
    "PairComparison",
    "PairedTest",
    "PoolAdditions",
    "PooledDocument",
    "Qrels",
    "RankBiasedOverlap",
    "Run",
    "SetParams",
    "SetScores",
    "StudyResults",
    "StudyTally",
    "SystemComparison",
    "SystemResults",
    "anchor_tier_grades",
    "binary_kappa",
    "bootstrap_interval",
    "cohen_kappa",
    "compare_systems",
    "confusion_matrix",
    "evaluate",
    "format_qrels",
    "judged_share",
    "kendall_tau_b",
    "labels_from_grade_levels",
    "labels_from_rank_bands",
    "mean_over_queries",
    "non_transitivity",
    "paired_test",
    "parse_candidate",
    "parse_candidates",
    "parse_measure",
    "parse_qrels",
    "parse_run",
    "pool_additions",
    "pool_runs",
    "preferences_from_outcomes",
    "rank_biased_overlap",
    "rank_by_mean",
    "rank_documents",
    "read_candidates",
    "read_qrels",
    "read_run",
    "set_scores",
    "spearman_rho",
    "study_results",
    "system_intervals",
    "tie_aware_ndcg",
    "tiers_from_scores",
    "utility_weights",
    "write_candidates",
    "write_qrels",
    "write_run",
]
