"""A study's results as report.json (schema "tierank.study.report/1", docs/studies.md), from
the StudyReport, the study and its queries as the server gives them."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from tierank.client._names import reason_name, state_name
from tierank.v1 import rank_pb2, study_pb2

SCHEMA = "tierank.study.report/1"


def study_state(state: int) -> str:
    """ "running" for STUDY_STATE_RUNNING; "unspecified" for a state this client does not know."""
    try:
        name = study_pb2.StudyState.Name(state)
    except ValueError:
        return "unspecified"
    return name.removeprefix("STUDY_STATE_").lower()


def _optional(message: Any, field: str) -> float | None:
    return getattr(message, field) if message.HasField(field) else None


def _interval(measure: study_pb2.MeasureInterval) -> dict[str, float | None]:
    interval = {
        "mean": _optional(measure, "mean"),
        "low": _optional(measure, "low"),
        "high": _optional(measure, "high"),
    }
    if measure.HasField("study_mean"):
        interval["study_mean"] = measure.study_mean
    return interval


def _cost(query: study_pb2.StudyQuery) -> dict[str, Any]:
    return {
        "calls": query.judge_calls,
        "input_tokens": query.usage.input_tokens,
        "output_tokens": query.usage.output_tokens,
        "cost_usd": query.usage.cost_usd,
        "critical_path": query.critical_path,
        "wall_seconds": query.wall_seconds,
        "pointwise_calls": query.pointwise_calls,
        "pointwise_input_tokens": query.pointwise_usage.input_tokens,
    }


def _comparison(c: study_pb2.SystemComparison) -> dict[str, Any]:
    return {
        "better": c.better,
        "worse": c.worse,
        "measure": c.measure,
        "difference": c.difference,
        "low": c.low,
        "high": c.high,
        "p_value": c.p_value,
        "p_value_adjusted": c.p_value_adjusted,
        "distinguishable": c.distinguishable,
        "queries": c.queries,
    }


def _confusion(confusion: Any) -> dict[str, Any]:
    return {
        "grades": list(confusion.grades),
        "matrix": [list(r.counts) for r in confusion.rows],
    }


def _sample(report: study_pb2.StudyReport) -> dict[str, Any] | None:
    if not report.HasField("sample"):
        return None
    sample = report.sample
    return {
        "queries": sample.queries,
        "judgments": sample.judgments,
        "outside_pool": sample.outside_pool,
        "pairs": sample.pairs,
        "kappa": _optional(sample, "kappa"),
        "weighted_kappa": _optional(sample, "weighted_kappa"),
        "confusion": _confusion(sample.confusion),
        "grades": [
            {"grade": g.grade, "count": g.count, "agreement": _optional(g, "agreement")}
            for g in sample.grades
        ],
        "grader_noise": sample.grader_noise,
        "grader_offsets": list(sample.grader_offsets),
    }


def report_json(
    study: study_pb2.Study,
    report: study_pb2.StudyReport,
    queries: Iterable[study_pb2.StudyQuery],
) -> dict[str, Any]:
    progress = report.progress
    measures = [m.measure for m in report.systems[0].measures] if report.systems else []
    per_query = []
    for query in queries:
        values: dict[str, dict[str, float | None]] = {}
        for entry in query.measures:
            values.setdefault(entry.system, {})[entry.measure] = _optional(entry, "value")
        per_query.append(
            {
                "query_id": query.query_id,
                "job": query.job,
                "settled": query.state == rank_pb2.JOB_STATE_SUCCEEDED
                and query.completion_reason == rank_pb2.COMPLETION_REASON_SETTLED,
                "state": state_name(query.state) if query.job else "not judged",
                "reason": reason_name(query.completion_reason),
                "pool_size": query.pool_size,
                "human_labels": query.human_labels,
                "probes": len(query.probes),
                "measures": values,
                "cost": _cost(query),
            }
        )
    agreement = None
    if report.HasField("agreement"):
        found = report.agreement
        agreement = {
            "pairs": found.pairs,
            "kappa": _optional(found, "kappa"),
            "weighted_kappa": _optional(found, "weighted_kappa"),
            "confusion": _confusion(found.confusion),
            "kendall_tau": _optional(found, "kendall_tau"),
            "rbo": _optional(found, "rbo"),
            "human_ranking": list(found.human_ranking),
            "human_measures": {
                system.system: {m.measure: _optional(m, "mean") for m in system.measures}
                for system in found.human_results
            },
        }
    wall = 0.0
    if study.HasField("start_time"):
        end = study.end_time if study.HasField("end_time") else study.update_time
        wall = max(0.0, (end.ToNanoseconds() - study.start_time.ToNanoseconds()) / 1e9)
    return {
        "schema": SCHEMA,
        "study": study.name,
        "display_name": study.spec.display_name,
        "state": study_state(study.state),
        "complete": report.complete,
        "depth": study.spec.depth,
        "labels": report.labels,
        "queries": {
            "total": progress.queries,
            "settled": progress.settled,
            "provisional": progress.provisional,
            "unjudged": progress.pending + progress.running + progress.failed,
            # Over labels (the means cover these), and not: never judged, or no judge answered.
            "judged": report.judged_queries,
            "not_judged": report.unjudged_queries,
        },
        "interval_method": report.interval_method or "bootstrap",
        "primary_measure": report.primary_measure,
        "measures": measures,
        "confidence": report.confidence,
        "systems": [
            {
                "name": system.system,
                "queries": next(
                    (m.count for m in system.measures if m.measure == report.primary_measure), 0
                ),
                "measures": {m.measure: _interval(m) for m in system.measures},
            }
            for system in report.systems
        ],
        "ranking": list(report.ranking),
        "comparisons": [_comparison(c) for c in report.comparisons],
        "pairs": [_comparison(c) for c in report.pairs],
        "per_query": per_query,
        "pooling": [
            {
                "system": judged.system,
                "round": judged.round,
                "judged_before": _optional(judged, "before"),
                "judged_after": judged.after,
                "documents_added": judged.documents_added,
            }
            for judged in report.judged
        ],
        "agreement": agreement,
        "sample": _sample(report),
        "warnings": list(report.warnings),
        # Judges that ran only because the study set allow_unqualified_judges.
        "unqualified_judges": [
            {"judge": judge.judge, "note": judge.note, "queries": judge.queries}
            for judge in report.unqualified_judges
        ],
        "cost": {
            "calls": report.cost.judge_calls,
            "input_tokens": report.cost.usage.input_tokens,
            "output_tokens": report.cost.usage.output_tokens,
            "cost_usd": report.cost.usage.cost_usd,
            "critical_path": report.cost.critical_path,
            "wall_seconds": wall,
            "pointwise_calls": report.cost.pointwise_calls,
            "pointwise_input_tokens": report.cost.pointwise_usage.input_tokens,
        },
    }
