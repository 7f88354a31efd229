"""A study's results, from its jobs' tiers: labels, each system's measures with bootstrap
intervals, the ranking and its paired tests, agreement with human qrels, cost.

The statistics run in a worker thread (thousands of queries, thousands of resamples): the
event loop only reads storage.
"""

from __future__ import annotations

import functools
from typing import Protocol

import anyio.to_thread

from tierank.evaluation import Qrels, StudyResults, StudyTally, judged_share
from tierank.evaluation.comparison import Interval
from tierank.limits import DEFAULT_STUDY_MEASURES
from tierank.server.labeling import DEFAULT_RANK_BANDS, fixed_mapping
from tierank.server.storage.base import JobReader, StudyQueryRow, StudyRecord, StudyStore
from tierank.server.studies.extension import pooled_systems
from tierank.server.studies.progress import every_query, labelling_job
from tierank.server.studies.scratch import ScratchInputs, open_scratch
from tierank.server.wire.jobs import TIER_EVENT_KINDS
from tierank.v1 import rank_pb2, study_pb2

CONFIDENCE = 0.95
# Queries whose tiers are read and tallied at once.
_REPORT_PAGE = 500
ALPHA = 0.05


class ReportStore(StudyStore, JobReader, Protocol):
    """The study's chunks and queries, and its jobs' tiers."""


class UnqualifiedJudges:
    """The judges that ran only because the study insisted (JudgeStats.admitted_unqualified),
    gathered from the queries' jobs as their tiers are read."""

    def __init__(self) -> None:
        # judge -> (note of the latest query read, queries)
        self._seen: dict[str, tuple[str, int]] = {}

    def add(self, stats: rank_pb2.JobStats) -> None:
        for judge in stats.judges:
            if judge.admitted_unqualified:
                _, queries = self._seen.get(judge.judge, ("", 0))
                self._seen[judge.judge] = (judge.admission_note, queries + 1)

    def to_proto(self) -> list[study_pb2.UnqualifiedJudge]:
        return [
            study_pb2.UnqualifiedJudge(judge=judge, note=note, queries=queries)
            for judge, (note, queries) in sorted(self._seen.items())
        ]


async def query_tiers(
    storage: ReportStore,
    record: StudyRecord,
    rows: list[StudyQueryRow],
    unqualified: UnqualifiedJudges | None = None,
) -> dict[str, list[list[str]]]:
    """Each judged query's tiers, best first: its job's latest; the judges that ran
    unqualified in those jobs are added to `unqualified`."""
    tiers: dict[str, list[list[str]]] = {}
    for row in rows:
        if job_id := labelling_job(row):
            latest = await storage.latest_event(record.tenant, job_id, TIER_EVENT_KINDS)
            if latest is None:
                continue
            event = rank_pb2.JobEvent.FromString(latest.payload)
            source = event.completed if event.HasField("completed") else event.tiers_updated
            if unqualified is not None:
                unqualified.add(source.stats)
            if source.tiers:
                tiers[row.query_id] = [list(t.candidate_ids) for t in source.tiers]
    return tiers


def labels_of(spec: study_pb2.StudySpec, tiers: dict[str, list[list[str]]]) -> Qrels:
    mapping = fixed_mapping("spec.labels", spec.labels)
    return {qid: mapping(query_tiers) for qid, query_tiers in tiers.items()}


async def build_report(
    storage: ReportStore, record: StudyRecord, progress: study_pb2.StudyProgress
) -> study_pb2.StudyReport:
    """The report, from the study's scratch inputs and its jobs' tiers a page of queries at a
    time: what it holds is each query's values, never every run or label at once."""
    spec = study_pb2.StudySpec.FromString(record.spec)
    counts = study_pb2.StudyInputs.FromString(record.inputs)
    measures = list(spec.measures) or list(DEFAULT_STUDY_MEASURES)
    rows = await every_query(storage, record.study_id)
    # A study that has started reports on the systems it pooled (not on runs added since).
    async with open_scratch(storage, record.study_id, pooled_systems(counts) or None) as scratch:
        human_queries = await anyio.to_thread.run_sync(scratch.human_queries)
        tally = StudyTally(
            measures,
            systems=scratch.systems(),
            primary=measures[0],
            with_human=any(row.query_id in human_queries for row in rows),
        )
        judged: dict[str, list[float]] = {system: [] for system in scratch.systems()}
        unqualified = UnqualifiedJudges()
        for start in range(0, len(rows), _REPORT_PAGE):
            page = rows[start : start + _REPORT_PAGE]
            labels = labels_of(spec, await query_tiers(storage, record, page, unqualified))
            await anyio.to_thread.run_sync(_tally, scratch, page, labels, tally, judged)
    results = await anyio.to_thread.run_sync(
        functools.partial(tally.results, confidence=CONFIDENCE, alpha=ALPHA)
    )
    report = _report(record, spec, progress, rows, results)
    report.judged.extend(_judged(counts, judged))
    report.unqualified_judges.extend(unqualified.to_proto())
    return report


def _tally(
    scratch: ScratchInputs,
    rows: list[StudyQueryRow],
    labels: Qrels,
    tally: StudyTally,
    judged: dict[str, list[float]],
) -> None:
    """Add the queries of `rows` to the tally (those with labels), and each system's share
    of its top 10 they label to `judged`."""
    for row in rows:
        qid = row.query_id
        runs = scratch.runs_of(qid)
        query_labels = labels.get(qid)
        if query_labels is not None:
            tally.add(qid, query_labels, runs, scratch.human_of(qid))
        for system, shares in judged.items():
            share = judged_share({qid: runs.get(system, {})}, labels, [qid])
            if share is not None:
                shares.append(share)


def _judged(
    counts: study_pb2.StudyInputs, shares: dict[str, list[float]]
) -> list[study_pb2.SystemJudged]:
    """Per pooled system, how much of its top-10 had labels before its round and has now."""
    judged = []
    for study_round in counts.rounds:
        for system in study_round.systems:
            if system not in shares:
                continue
            entry = study_pb2.SystemJudged(
                system=system,
                round=study_round.round,
                after=sum(shares[system]) / len(shares[system]) if shares[system] else 0.0,
                documents_added=study_round.documents_added,
            )
            if system in study_round.judged_before:
                entry.before = study_round.judged_before[system]
            judged.append(entry)
    return judged


def _interval(measure: str, interval: Interval, count: int) -> study_pb2.MeasureInterval:
    result = study_pb2.MeasureInterval(measure=measure, count=count)
    if interval.mean is not None:
        result.mean = interval.mean
    if interval.low is not None:
        result.low = interval.low
    if interval.high is not None:
        result.high = interval.high
    return result


def _report(
    record: StudyRecord,
    spec: study_pb2.StudySpec,
    progress: study_pb2.StudyProgress,
    rows: list[StudyQueryRow],
    results: StudyResults,
) -> study_pb2.StudyReport:
    report = study_pb2.StudyReport(
        study=f"studies/{record.study_id}",
        state=record.state,  # type: ignore[arg-type]
        progress=progress,
        primary_measure=results.primary_measure,
        confidence=results.confidence,
        ranking=results.ranking,
        labels=describe_labels(spec),
    )
    report.complete = progress.settled == progress.queries
    for system in results.systems:
        counts = {
            measure: sum(
                1
                for values in results.per_query.values()
                if values.get(system.name, {}).get(measure) is not None
            )
            for measure in results.measures
        }
        report.systems.append(
            study_pb2.SystemResult(
                system=system.name,
                measures=[_interval(m, system.measures[m], counts[m]) for m in results.measures],
            )
        )
    for adjacent in results.comparisons:
        test = adjacent.test
        report.comparisons.append(
            study_pb2.SystemComparison(
                better=adjacent.better,
                worse=adjacent.worse,
                measure=results.primary_measure,
                difference=test.difference or 0.0,
                low=test.low or 0.0,
                high=test.high or 0.0,
                p_value=1.0 if test.p_value is None else test.p_value,
                distinguishable=adjacent.distinguishable,
                queries=test.count,
            )
        )
    if results.agreement is not None:
        _agreement(report.agreement, results)
    cost = report.cost
    cost.judge_calls = progress.judge_calls
    cost.usage.CopyFrom(progress.usage)
    cost.critical_path = progress.critical_path
    for row in rows:
        query = (
            study_pb2.StudyQuery.FromString(row.outcome)
            if row.outcome
            else study_pb2.StudyQuery(query_id=row.query_id, pool_size=row.pool_size)
        )
        if (job_id := labelling_job(row)) and not query.job:
            query.job = f"jobs/{job_id}"
        for system_name, values in results.per_query.get(row.query_id, {}).items():
            for measure, value in values.items():
                entry = query.measures.add(system=system_name, measure=measure)
                if value is not None:
                    entry.value = value
        report.queries.append(query)
    return report


def _agreement(target: study_pb2.LabelAgreement, results: StudyResults) -> None:
    agreement = results.agreement
    assert agreement is not None
    target.pairs = agreement.pairs
    if agreement.kappa is not None:
        target.kappa = agreement.kappa
    if agreement.weighted_kappa is not None:
        target.weighted_kappa = agreement.weighted_kappa
    if agreement.kendall_tau is not None:
        target.kendall_tau = agreement.kendall_tau
    target.rbo = agreement.rbo
    target.human_ranking.extend(agreement.human_ranking)
    confusion = agreement.confusion
    # The categories are the labels' grades, ints.
    target.confusion.grades.extend(int(str(grade)) for grade in confusion.categories)
    for counts in confusion.counts:
        target.confusion.rows.add(counts=counts)
    for system, means in agreement.human_measures.items():
        human = target.human_results.add(system=system)
        for measure, mean in means.items():
            entry = human.measures.add(measure=measure)
            if mean is not None:
                entry.mean = mean


def describe_labels(spec: study_pb2.StudySpec) -> str:
    """How tiers became grades, in words."""
    labels = spec.labels
    if labels.WhichOneof("mapping") == "grade_levels":
        levels = labels.grade_levels.levels or 4
        lowest = labels.grade_levels.lowest
        return f"grade levels: tiers split evenly over {levels} grades from {lowest}"
    bands = [(b.last_position, b.grade) for b in labels.rank_bands.bands] or list(
        DEFAULT_RANK_BANDS
    )
    text, first = [], 1
    for last, grade in bands:
        text.append(f"{first}-{last}:{grade}")
        first = last + 1
    position = "mean" if labels.rank_bands.mean_position else "first"
    return (
        f"rank bands {' '.join(text)} below:{labels.rank_bands.below} "
        f"(a tier by its {position} position)"
    )
