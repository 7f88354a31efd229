"""A study's labels: how each judged query's tiers (and, for pointwise labels, its probes)
become grades, and what the human sample changes.

Fixed mappings (rank bands, grade levels) label each query on its own. Pointwise labels come
from a model fitted across the study's queries (evaluation/grade_model.py): the labels of any
query depend on the model, so they are made in two passes: one over every query's probes to
fit it, one a page at a time to label. With a human sample:

- the model's emission is fitted to the sample's (human grade, probe) pairs and the sample's
  queries enter the chain as observed grades;
- each sample query is reported with the person's grades (the model's where they gave none);
- for the agreement, each sample query also gets the study's *own* labels, from a model
  fitted without that query's human grades (its fold of FOLDS), so that its disagreement with
  the person is what the study's is elsewhere;
- the prediction-powered intervals correct predictions of a person's values made by the
  model of the probes alone, for every query: predictions that do not depend on the sample
  make its human-minus-study differences those of every other query by construction (the
  fold models would each predict a little differently, noise the correction then carries),
  and the correction, not the model, is what a grader's bias is set right by there.

A query whose job learned nothing (every judge call failed) has no labels: it is not judged.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import anyio.to_thread

from tierank.evaluation import Qrels
from tierank.evaluation.grade_model import (
    GradeModel,
    ProbedOrder,
    fit_grade_model,
    fit_sample_emission,
)
from tierank.server.labeling import fixed_mapping
from tierank.server.storage.base import JobReader, StudyQueryRow, StudyRecord, StudyStore
from tierank.server.studies.progress import judged_something, labelling_job
from tierank.server.wire.jobs import TIER_EVENT_KINDS
from tierank.v1 import rank_pb2, study_pb2

# Folds of the sample's queries for their own labels: each is labelled by a model fitted on
# the others' human grades.
FOLDS = 5


class LabelStore(StudyStore, JobReader, Protocol):
    """The study's queries and their jobs' tiers."""


@dataclass(frozen=True)
class QueryOrder:
    """A judged query: its tiers (best first) and the grades its probes got."""

    query_id: str
    tiers: list[list[str]]
    probes: dict[str, int]

    @property
    def documents(self) -> list[str]:
        return [doc for tier in self.tiers for doc in tier]


def is_pointwise(spec: study_pb2.StudySpec) -> bool:
    return spec.labels.WhichOneof("mapping") == "pointwise"


async def judged_orders(
    storage: LabelStore,
    record: StudyRecord,
    rows: Sequence[StudyQueryRow],
    seen: Callable[[rank_pb2.JobStats], None] | None = None,
) -> list[QueryOrder]:
    """The rows' judged queries, in their order: each one's latest tiers and its probes. A
    query with no job, no tiers or a job no judge answered is left out. `seen` is given the
    stats of every query's job that has some (judged or not)."""
    found = []
    for row in rows:
        job_id = labelling_job(row)
        if not job_id:
            continue
        latest = await storage.latest_event(record.tenant, job_id, TIER_EVENT_KINDS)
        if latest is None:
            continue
        event = rank_pb2.JobEvent.FromString(latest.payload)
        source = event.completed if event.HasField("completed") else event.tiers_updated
        if seen is not None:
            seen(source.stats)
        outcome = _outcome(row)
        if not source.tiers or (outcome is not None and not judged_something(outcome, latest)):
            continue
        probes = {p.doc_id: p.grade for p in outcome.probes} if outcome is not None else {}
        found.append(
            QueryOrder(row.query_id, [list(t.candidate_ids) for t in source.tiers], probes)
        )
    return found


def _outcome(row: StudyQueryRow) -> study_pb2.StudyQuery | None:
    """What the query ended with (its probes, its job's outcome), or while it is judged again,
    what its previous job ended with; None for a query still running its first job."""
    if row.outcome:
        return study_pb2.StudyQuery.FromString(row.outcome)
    if row.carried:
        return study_pb2.StudyQuery.FromString(row.carried)
    return None


@dataclass
class Sample:
    """The human sample: query -> document -> grade."""

    grades: dict[str, dict[str, int]] = field(default_factory=dict)

    def folds(self) -> dict[str, int]:
        """Each sample query's fold (round robin over the queries by id)."""
        queries = sorted(self.grades)
        return {query: i % FOLDS for i, query in enumerate(queries)}


@dataclass(frozen=True)
class QueryLabels:
    """One query's labels: `reported` (what qrels.txt holds) and `own` (the study's own, made
    without the query's human grades; the same as reported outside the sample), and, where
    asked for, `predictions`: label sets whose measures predict a person's (the labels of the
    model of the probes alone at the posterior's PREDICTION_QUANTILES; the own labels alone
    for a fixed mapping)."""

    query_id: str
    reported: dict[str, int]
    own: dict[str, int]
    sample: dict[str, int] | None
    predictions: list[dict[str, int]] | None = None


class Labeller:
    """Labels judged queries under the study's mapping, a page at a time: pointwise ones with
    `model` (the sample's queries' own labels with `folds`) and their predictions with
    `predictor`, the model of the probes alone (`model` when not given)."""

    def __init__(
        self,
        spec: study_pb2.StudySpec,
        sample: Sample,
        model: GradeModel | None = None,
        folds: Mapping[int, GradeModel] | None = None,
        predictor: GradeModel | None = None,
    ) -> None:
        self._spec = spec
        self._sample = sample
        self._model = model
        self._folds = folds or {}
        self._predictor = predictor or model
        self._fold_of = sample.folds()
        self._fixed = None if is_pointwise(spec) else fixed_mapping("spec.labels", spec.labels)

    @property
    def model(self) -> GradeModel | None:
        return self._model

    def label(
        self, orders: Sequence[QueryOrder], *, predictions: bool = False
    ) -> list[QueryLabels]:
        """The labels of `orders` (a page of judged queries); with `predictions`, each one's
        prediction label sets too (for prediction-powered intervals)."""
        predicted: list[list[dict[str, int]]] | None = None
        if self._fixed is not None:
            own = [self._fixed(order.tiers) for order in orders]
            predicted = [[grades] for grades in own] if predictions else None
        else:
            assert self._model is not None  # pointwise labellers are built with theirs
            assert self._predictor is not None
            own = self._decode(self._model, orders, with_sample=False)
            if predictions:
                predicted = self._quantiles(self._predictor, orders)
            for fold, model in self._folds.items():
                chosen = [i for i, o in enumerate(orders) if self._fold_of.get(o.query_id) == fold]
                in_fold = [orders[i] for i in chosen]
                for i, grades in zip(chosen, self._decode(model, in_fold, False), strict=True):
                    own[i] = grades
        reported = list(own)
        in_sample = [i for i, o in enumerate(orders) if o.query_id in self._sample.grades]
        if in_sample and self._model is not None:
            calibrated = self._decode(self._model, [orders[i] for i in in_sample], True)
            for i, grades in zip(in_sample, calibrated, strict=True):
                reported[i] = grades
        labels = []
        for i, order in enumerate(orders):
            human = self._sample.grades.get(order.query_id)
            shown = dict(reported[i])
            if human is not None:
                shown.update(human)
            prediction = predicted[i] if predicted is not None else None
            labels.append(QueryLabels(order.query_id, shown, own[i], human, prediction))
        return labels

    def _quantiles(
        self, model: GradeModel, orders: Sequence[QueryOrder]
    ) -> list[list[dict[str, int]]]:
        probed = [probed_order(o, None) for o in orders]
        return [
            [dict(zip(order.documents, grades, strict=True)) for grades in sets]
            for order, sets in zip(orders, model.quantile_grades(probed), strict=True)
        ]

    def _decode(
        self, model: GradeModel, orders: Sequence[QueryOrder], with_sample: bool
    ) -> list[dict[str, int]]:
        probed = [probed_order(o, self._sample if with_sample else None) for o in orders]
        return [
            dict(zip(order.documents, grades, strict=True))
            for order, grades in zip(orders, model.grades(probed), strict=True)
        ]


def probed_order(order: QueryOrder, sample: Sample | None) -> ProbedOrder:
    """The query as the grade model sees it: positions, the probes' grades by position, and
    the sample's human grades by position where `sample` has the query."""
    documents = order.documents
    probes = {p: [order.probes[d]] for p, d in enumerate(documents) if d in order.probes}
    human = sample.grades.get(order.query_id) if sample is not None else None
    return ProbedOrder(
        len(documents),
        probes,
        [human.get(d) for d in documents] if human is not None else None,
    )


@dataclass
class ProbeReadings:
    """What the models are fitted on: every judged query as the grade model sees it (no
    human grades), and the sample's judged queries whole (their probes against their human
    grades), by position in `probed`."""

    probed: list[ProbedOrder] = field(default_factory=list)
    sampled: dict[int, QueryOrder] = field(default_factory=dict)

    def add(self, orders: Iterable[QueryOrder], sample: Sample) -> None:
        for order in orders:
            if order.query_id in sample.grades:
                self.sampled[len(self.probed)] = order
            self.probed.append(probed_order(order, None))


def fit_models(
    readings: ProbeReadings, sample: Sample, seed: int, base: GradeModel | None = None
) -> tuple[GradeModel, dict[int, GradeModel]]:
    """The study's grade model (every human grade of the sample in it) and one per fold of
    the sample's queries (that fold's human grades left out). Each starts from `base`, the
    model of the probes alone (the grader's noise fitted once, over every probe; fitted here
    when not given). Synchronous: run it in a worker thread."""
    if base is None:
        base = fit_grade_model(readings.probed, seed=seed)
    if not sample.grades:
        return base, {}
    model = _fit(readings, sample, seed, base, excluded=frozenset())
    fold_of = sample.folds()
    folds = {
        fold: _fit(
            readings,
            sample,
            seed,
            base,
            excluded=frozenset(q for q, f in fold_of.items() if f == fold),
        )
        for fold in sorted(set(fold_of.values()))
    }
    return model, folds


def _fit(
    readings: ProbeReadings,
    sample: Sample,
    seed: int,
    base: GradeModel,
    excluded: frozenset[str],
) -> GradeModel:
    known = Sample({q: g for q, g in sample.grades.items() if q not in excluded})
    probed = list(readings.probed)
    pairs: list[tuple[int, int]] = []
    for index, order in readings.sampled.items():
        grades = known.grades.get(order.query_id)
        if grades is None:
            continue
        probed[index] = probed_order(order, known)
        pairs.extend((grades[doc], probe) for doc, probe in order.probes.items() if doc in grades)
    return fit_grade_model(probed, sample=fit_sample_emission(pairs), base=base, seed=seed)


async def study_labeller(
    storage: LabelStore,
    record: StudyRecord,
    rows: Sequence[StudyQueryRow],
    sample: Sample,
    page: int,
) -> Labeller:
    """The study's labeller: for pointwise labels, its models fitted over every judged query
    of `rows` (read `page` queries at a time; fitted in a worker thread)."""
    spec = study_pb2.StudySpec.FromString(record.spec)
    if not is_pointwise(spec):
        return Labeller(spec, sample)
    readings = ProbeReadings()
    for start in range(0, len(rows), page):
        readings.add(await judged_orders(storage, record, rows[start : start + page]), sample)
    seed = spec.labels.pointwise.seed
    probes = await anyio.to_thread.run_sync(
        functools.partial(fit_grade_model, readings.probed, seed=seed)
    )
    model, folds = await anyio.to_thread.run_sync(fit_models, readings, sample, seed, probes)
    return Labeller(spec, sample, model, folds, predictor=probes)


def reported_qrels(labels: Iterable[QueryLabels]) -> Qrels:
    return {query.query_id: query.reported for query in labels}
