"""A study's results, from its jobs' tiers and probes: labels, each system's measures with
intervals (bootstrap, or prediction-powered with a human sample), the ranking and the tests of
every pair, agreement with human qrels and with the human sample, cost.

The statistics run in a worker thread (thousands of queries, thousands of resamples): the
event loop only reads storage.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Protocol

import anyio.to_thread

from tierank.evaluation import StudyResults, StudyTally, judged_share
from tierank.evaluation.agreement import ConfusionMatrix
from tierank.evaluation.comparison import Interval, PairComparison
from tierank.evaluation.grade_model import GradeModel
from tierank.evaluation.study_results import SampleAgreement
from tierank.limits import DEFAULT_STUDY_MEASURES
from tierank.server.errors import FieldViolation
from tierank.server.labeling import DEFAULT_RANK_BANDS
from tierank.server.storage.base import StudyQueryRow, StudyRecord
from tierank.server.studies.extension import pooled_systems
from tierank.server.studies.grading import probe_rate
from tierank.server.studies.labels import (
    Labeller,
    LabelStore,
    QueryLabels,
    QueryOrder,
    Sample,
    is_pointwise,
    judged_orders,
    study_labeller,
)
from tierank.server.studies.progress import every_query, labelling_job
from tierank.server.studies.scratch import ScratchInputs, open_scratch
from tierank.v1 import eval_pb2, rank_pb2, study_pb2

CONFIDENCE = 0.95
# Queries whose tiers are read and tallied at once.
_REPORT_PAGE = 500
ALPHA = 0.05


class ReportStore(LabelStore, Protocol):
    """The study's chunks and queries, and its jobs' tiers."""


def sample_of(scratch: ScratchInputs, queries: set[str]) -> Sample:
    """The human sample's grades of the study's `queries` (its grades of other queries are
    refused where they are sent, and left out here)."""
    return Sample(
        {
            query: grades
            for query in scratch.sample_queries()
            if query in queries and (grades := scratch.sample_of(query))
        }
    )


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


def sample_violations(scratch: ScratchInputs, queries: set[str]) -> list[FieldViolation]:
    """The human sample's queries that are not the study's (`queries`)."""
    strangers = [query for query in scratch.sample_queries() if query not in queries]
    if not strangers:
        return []
    return [
        FieldViolation(
            "human_sample",
            f"{len(strangers)} queries of the human sample are not in the study (no topic,"
            f" or no run retrieved anything for them), e.g. {strangers[:5]}",
        )
    ]


async def export_labeller(storage: ReportStore, record: StudyRecord) -> Labeller:
    """What labels the study's queries for its qrels: for pointwise labels, the model its
    final report stored (or, while it runs, one fitted now), with its human sample."""
    spec = study_pb2.StudySpec.FromString(record.spec)
    counts = study_pb2.StudyInputs.FromString(record.inputs)
    if not is_pointwise(spec) and not counts.human_sample_judgments:
        return Labeller(spec, Sample())
    rows = await every_query(storage, record.study_id)
    sample = Sample()
    if counts.human_sample_judgments:
        async with open_scratch(storage, record.study_id) as scratch:
            sample = await anyio.to_thread.run_sync(
                sample_of, scratch, {row.query_id for row in rows}
            )
    if not is_pointwise(spec):
        return Labeller(spec, sample)
    stored = await storage.study_report(record.tenant, record.study_id)
    if stored:
        final = study_pb2.StudyReport.FromString(stored)
        if final.HasField("label_model"):
            return Labeller(spec, sample, grade_model(final.label_model))
    return await study_labeller(storage, record, rows, sample, _REPORT_PAGE)


@dataclass
class _SampleCounts:
    judgments: int = 0
    outside_pool: int = 0


@dataclass
class _ProbeCounts:
    """Pointwise probes answered over the judged queries, and queries with none."""

    answered: int = 0
    unprobed_queries: int = 0

    def count(self, orders: list[QueryOrder]) -> None:
        for order in orders:
            self.answered += len(order.probes)
            self.unprobed_queries += not order.probes


def _warnings(
    spec: study_pb2.StudySpec,
    rows: list[StudyQueryRow],
    judged: int,
    sampled: _SampleCounts,
    probes: _ProbeCounts,
) -> list[str]:
    """What a reader of the study's numbers should know."""
    warnings = []
    if judged < len(rows):
        warnings.append(
            f"{len(rows) - judged} of the {len(rows)} queries were not judged (no judge"
            " answered them, or the budget, the deadline or a cancel left them out): they have"
            f" no labels, and every mean is over the other {judged}"
        )
    largest = max((row.pool_size for row in rows), default=0)
    if spec.labels.WhichOneof("mapping") in (None, "rank_bands") and largest:
        bands = [(b.last_position, b.grade) for b in spec.labels.rank_bands.bands]
        bands = bands or list(DEFAULT_RANK_BANDS)
        reached = [grade for last, grade in bands if last >= largest]
        if reached and reached[0] > 0:
            warnings.append(
                f"the rank bands reach position {bands[-1][0]} but no pool holds more than"
                f" {largest} documents: every pooled document gets a grade above 0, so every"
                " one counts as relevant (use pointwise labels, or --bands sized to the pools)"
            )
    if is_pointwise(spec) and judged:
        if not probes.answered:
            warnings.append(
                "the pointwise grader answered none of its probes: the grades come from the"
                " tier order alone and mean little"
            )
        elif probes.unprobed_queries:
            warnings.append(
                f"{probes.unprobed_queries} judged queries got no pointwise probe answered:"
                " their grades come from their tier order and the other queries' probes"
            )
    if sampled.outside_pool:
        warnings.append(
            f"{sampled.outside_pool} judgments of the human sample are of documents outside"
            " their query's pool: kept as labels, not compared"
        )
    return warnings


async def build_report(
    storage: ReportStore, record: StudyRecord, progress: study_pb2.StudyProgress
) -> study_pb2.StudyReport:
    """The report, from the study's scratch inputs and its jobs' tiers a page of queries at a
    time: what it holds is each query's values, never every run or label at once (pointwise
    labels read every query's probes once more, first, to fit their model)."""
    spec = study_pb2.StudySpec.FromString(record.spec)
    counts = study_pb2.StudyInputs.FromString(record.inputs)
    measures = list(spec.measures) or list(DEFAULT_STUDY_MEASURES)
    rows = await every_query(storage, record.study_id)
    # A study that has started reports on the systems it pooled (not on runs added since).
    async with open_scratch(storage, record.study_id, pooled_systems(counts) or None) as scratch:
        human_queries = await anyio.to_thread.run_sync(scratch.human_queries)
        sample = await anyio.to_thread.run_sync(sample_of, scratch, {row.query_id for row in rows})
        labeller = await study_labeller(storage, record, rows, sample, _REPORT_PAGE)
        tally = StudyTally(
            measures,
            systems=scratch.systems(),
            primary=measures[0],
            with_human=any(row.query_id in human_queries for row in rows),
        )
        judged: dict[str, list[float]] = {system: [] for system in scratch.systems()}
        labelled = 0
        unqualified = UnqualifiedJudges()
        sampled = _SampleCounts()
        probes = _ProbeCounts()
        for start in range(0, len(rows), _REPORT_PAGE):
            page = rows[start : start + _REPORT_PAGE]
            orders = await judged_orders(storage, record, page, unqualified.add)
            probes.count(orders)
            # A human sample's intervals correct the study's predictions of a person's values.
            label = functools.partial(labeller.label, predictions=bool(sample.grades))
            labels = await anyio.to_thread.run_sync(label, orders)
            labelled += len(labels)
            await anyio.to_thread.run_sync(_tally, scratch, labels, tally, judged, sampled)
    results = await anyio.to_thread.run_sync(
        functools.partial(tally.results, confidence=CONFIDENCE, alpha=ALPHA)
    )
    report = _report(record, spec, progress, rows, results)
    for query in report.queries:
        query.human_labels = query.query_id in sample.grades
    report.judged.extend(_judged(counts, judged, len(rows)))
    report.judged_queries = labelled
    report.unjudged_queries = len(rows) - labelled
    report.warnings.extend(_warnings(spec, rows, labelled, sampled, probes))
    if results.sample is not None:
        _sample(report.sample, results.sample, sampled, labeller.model)
    if labeller.model is not None:
        report.label_model.CopyFrom(label_model(labeller.model))
    report.unqualified_judges.extend(unqualified.to_proto())
    return report


def _tally(
    scratch: ScratchInputs,
    labels: list[QueryLabels],
    tally: StudyTally,
    judged: dict[str, list[float]],
    sampled: _SampleCounts,
) -> None:
    """Add the judged queries of a page to the tally, and each system's share of its top 10
    they label to `judged`."""
    for query in labels:
        qid = query.query_id
        runs = scratch.runs_of(qid)
        sample = query.sample
        if sample is not None:
            sampled.judgments += len(sample)
            sampled.outside_pool += sum(1 for doc in sample if doc not in query.own)
        tally.add(
            qid,
            query.own,
            runs,
            scratch.human_of(qid),
            sample=query.reported if sample is not None else None,
            sample_grades=sample,
            predictions=query.predictions,
        )
        for system, shares in judged.items():
            share = judged_share({qid: runs.get(system, {})}, {qid: query.reported}, [qid])
            if share is not None:
                shares.append(share)


def _judged(
    counts: study_pb2.StudyInputs, shares: dict[str, list[float]], queries: int
) -> list[study_pb2.SystemJudged]:
    """Per pooled system, how much of its top-10 had labels before its round and has now
    (over the study's `queries`: a query not judged has none of it labelled)."""
    judged = []
    for study_round in counts.rounds:
        for system in study_round.systems:
            if system not in shares:
                continue
            entry = study_pb2.SystemJudged(
                system=system,
                round=study_round.round,
                after=sum(shares[system]) / queries if queries else 0.0,
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
    report.interval_method = results.interval_method
    for result in report.systems:
        for interval in result.measures:
            study_mean = results.study_means.get(result.system, {}).get(interval.measure)
            if study_mean is not None:
                interval.study_mean = study_mean
    report.comparisons.extend(_comparison(c, results.primary_measure) for c in results.comparisons)
    report.pairs.extend(_comparison(c, results.primary_measure) for c in results.pairs)
    if results.agreement is not None:
        _agreement(report.agreement, results)
    cost = report.cost
    cost.judge_calls = progress.judge_calls
    cost.usage.CopyFrom(progress.usage)
    cost.critical_path = progress.critical_path
    cost.pointwise_calls = progress.pointwise_calls
    cost.pointwise_usage.CopyFrom(progress.pointwise_usage)
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


def _comparison(pair: PairComparison, measure: str) -> study_pb2.SystemComparison:
    test = pair.test
    return study_pb2.SystemComparison(
        better=pair.better,
        worse=pair.worse,
        measure=measure,
        difference=test.difference or 0.0,
        low=test.low or 0.0,
        high=test.high or 0.0,
        p_value=1.0 if test.p_value is None else test.p_value,
        p_value_adjusted=1.0 if pair.p_adjusted is None else pair.p_adjusted,
        distinguishable=pair.distinguishable,
        queries=test.count,
    )


def _sample(
    target: study_pb2.SampleAgreement,
    agreement: SampleAgreement,
    counts: _SampleCounts,
    model: GradeModel | None,
) -> None:
    target.queries = agreement.queries
    target.judgments = counts.judgments
    target.outside_pool = counts.outside_pool
    target.pairs = agreement.pairs
    if agreement.kappa is not None:
        target.kappa = agreement.kappa
    if agreement.weighted_kappa is not None:
        target.weighted_kappa = agreement.weighted_kappa
    _confusion(target.confusion, agreement.confusion)
    for grade, (count, same) in sorted(agreement.grades.items()):
        entry = target.grades.add(grade=grade, count=count)
        if same is not None:
            entry.agreement = same
    if model is not None:
        target.grader_noise = model.noise
        target.grader_offsets.extend(model.offsets)


def _confusion(target: eval_pb2.ConfusionMatrix, confusion: ConfusionMatrix) -> None:
    # The categories are the labels' grades, ints.
    target.grades.extend(int(str(grade)) for grade in confusion.categories)
    for counts in confusion.counts:
        target.rows.add(counts=counts)


def label_model(model: GradeModel) -> study_pb2.LabelModel:
    return study_pb2.LabelModel(
        start=model.start.tolist(),
        steps=model.steps.ravel().tolist(),
        emission=model.emission.ravel().tolist(),
        noise=model.noise,
        offsets=list(model.offsets),
    )


def grade_model(stored: study_pb2.LabelModel) -> GradeModel:
    """The model a final report stored (label_model's inverse)."""
    import numpy as np

    size = len(stored.start)
    return GradeModel(
        np.array(stored.start),
        np.array(stored.steps).reshape(size, size),
        np.array(stored.emission).reshape(size, size),
        stored.noise,
        tuple(stored.offsets),
        0.0,
    )


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
    _confusion(target.confusion, agreement.confusion)
    for system, means in agreement.human_measures.items():
        human = target.human_results.add(system=system)
        for measure, mean in means.items():
            entry = human.measures.add(measure=measure)
            if mean is not None:
                entry.mean = mean


def describe_labels(spec: study_pb2.StudySpec) -> str:
    """How tiers became grades, in words."""
    labels = spec.labels
    if is_pointwise(spec):
        judge = labels.pointwise.judge
        name = judge.provider + (f":{judge.model}" if judge.model else "")
        return (
            f"pointwise: {name} graded {probe_rate(spec):g} of each pool's documents along its"
            " tier order (half spread, half where the systems' top ranks differ most); grades"
            " read off the order and the probes by a monotone model fitted across the queries"
        )
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
