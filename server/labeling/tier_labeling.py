"""Labels from jobs' tiers: one job per query, tiers mapped to grades (tierank.evaluation).

Pointwise anchoring runs the pure binary search (`anchor_tier_grades`, synchronous) in a worker
thread; each grade it asks for is one async grader call made back on the event loop. Jobs are
anchored concurrently; the calls within one job follow each other, as the search needs.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal, Protocol

import anyio
import anyio.from_thread
import anyio.to_thread

from tierank.evaluation import (
    Qrels,
    anchor_tier_grades,
    labels_from_grade_levels,
    labels_from_rank_bands,
)
from tierank.server.errors import FieldViolation, InvalidInput, NotFound, Unavailable
from tierank.server.judges.base import FailureKind
from tierank.server.judges.graders import Grader
from tierank.server.judges.registry import JudgeFactory
from tierank.server.labeling.grading import Pair, PairGrader, build_grader
from tierank.server.names import BadName, parse_job_name
from tierank.server.storage.base import JobReader, VerdictCache
from tierank.server.tenancy.provider_accounts import ProviderAccounts
from tierank.server.tenancy.spending import SpendLedger
from tierank.server.wire.jobs import TIER_EVENT_KINDS, job_detail
from tierank.server.wire.specs import pool_context
from tierank.v1 import eval_pb2, rank_pb2

# (last position, grade): the rank bands of TierMapping when none are given (eval.proto).
DEFAULT_RANK_BANDS = ((10, 3), (30, 2), (100, 1))
# Calls in flight across the jobs being anchored at once.
_ANCHOR_IN_FLIGHT = 8
_RETRY_AFTER_S = 1.0


@dataclass(frozen=True)
class _LabeledJob:
    query_id: str
    job: rank_pb2.Job


async def _load_jobs(
    field: str, labels: eval_pb2.TierLabels, storage: JobReader, tenant: str
) -> list[_LabeledJob]:
    violations: list[FieldViolation] = []
    if not labels.jobs:
        violations.append(FieldViolation(f"{field}.jobs", "must name at least one job"))
    seen: dict[str, int] = {}
    for i, entry in enumerate(labels.jobs):
        try:
            parse_job_name(entry.job)
        except BadName as bad:
            violations.append(FieldViolation(f"{field}.jobs[{i}].job", str(bad)))
        if not entry.query_id.strip():
            violations.append(FieldViolation(f"{field}.jobs[{i}].query_id", "must not be empty"))
        elif entry.query_id in seen:
            violations.append(
                FieldViolation(
                    f"{field}.jobs[{i}].query_id",
                    f"duplicates {field}.jobs[{seen[entry.query_id]}]",
                )
            )
        seen.setdefault(entry.query_id, i)
    if violations:
        raise InvalidInput(violations)
    loaded: list[_LabeledJob] = []
    for i, entry in enumerate(labels.jobs):
        # Another tenant's job is not found, exactly like a job that does not exist.
        record = await storage.get_job(tenant, parse_job_name(entry.job))
        if record is None:
            raise NotFound(entry.job)
        latest = await storage.latest_event(tenant, record.job_id, TIER_EVENT_KINDS)
        # FULL: pointwise labeling shows the judges the candidates' texts.
        job = job_detail(record, latest, rank_pb2.JOB_VIEW_FULL)
        if not job.tiers:
            violations.append(
                FieldViolation(f"{field}.jobs[{i}].job", f"{entry.job} has no tiers yet")
            )
        loaded.append(_LabeledJob(entry.query_id, job))
    if violations:
        raise InvalidInput(violations)
    return loaded


def _tier_lists(job: rank_pb2.Job) -> list[list[str]]:
    return [list(t.candidate_ids) for t in job.tiers]


def fixed_mapping(
    field: str, mapping: eval_pb2.TierMapping
) -> Callable[[list[list[str]]], dict[str, int]]:
    kind = mapping.WhichOneof("mapping")
    if kind == "grade_levels":
        levels = mapping.grade_levels.levels or 4
        if levels < 1:
            raise InvalidInput(
                [FieldViolation(f"{field}.mapping.grade_levels.levels", "must be positive")]
            )
        lowest = mapping.grade_levels.lowest
        return lambda tiers: labels_from_grade_levels(tiers, levels, lowest)
    bands_message = mapping.rank_bands
    bands = tuple((b.last_position, b.grade) for b in bands_message.bands) or DEFAULT_RANK_BANDS
    lasts = [last for last, _ in bands]
    if lasts != sorted(set(lasts)) or lasts[0] < 1:
        raise InvalidInput(
            [
                FieldViolation(
                    f"{field}.mapping.rank_bands.bands",
                    "last_position must be positive and strictly increasing",
                )
            ]
        )
    position: Literal["first", "mean"] = "mean" if bands_message.mean_position else "first"
    below = bands_message.below
    return lambda tiers: labels_from_rank_bands(tiers, bands, below, position)


class LabelingStore(JobReader, VerdictCache, Protocol):
    """The jobs whose tiers are labeled, and the verdict cache pointwise anchoring grades
    through."""


async def tier_labels(
    field: str,
    labels: eval_pb2.TierLabels,
    storage: LabelingStore,
    factory: JudgeFactory,
    accounts: ProviderAccounts,
    spending: SpendLedger,
    tenant: str,
) -> tuple[Qrels, list[eval_pb2.LabelingReport]]:
    """Qrels from the jobs' tiers under the request's mapping, and how each job was labeled."""
    jobs = await _load_jobs(field, labels, storage, tenant)
    if labels.mapping.WhichOneof("mapping") == "pointwise":
        grader = await build_grader(
            f"{field}.mapping.pointwise.judge",
            labels.mapping.pointwise.judge,
            factory,
            accounts,
            tenant,
        )
        return await _anchored(
            f"{field}.mapping.pointwise",
            labels.mapping.pointwise,
            jobs,
            storage,
            spending,
            grader,
            tenant,
        )
    mapping = fixed_mapping(field, labels.mapping)
    qrels: Qrels = {}
    reports = []
    for labeled in jobs:
        qrels[labeled.query_id] = mapping(_tier_lists(labeled.job))
        reports.append(_report(labeled, qrels[labeled.query_id]))
    return qrels, reports


def _report(
    labeled: _LabeledJob, grades: dict[str, int], **anchoring: int
) -> eval_pb2.LabelingReport:
    return eval_pb2.LabelingReport(
        query_id=labeled.query_id,
        job=labeled.job.name,
        tier_count=len(labeled.job.tiers),
        labeled_documents=len(grades),
        **anchoring,
    )


async def _anchored(
    field: str,
    anchoring: eval_pb2.PointwiseAnchoring,
    jobs: Sequence[_LabeledJob],
    storage: VerdictCache,
    spending: SpendLedger,
    grader: Grader,
    tenant: str,
) -> tuple[Qrels, list[eval_pb2.LabelingReport]]:
    qrels: Qrels = {}
    reports: dict[str, eval_pb2.LabelingReport] = {}
    errors: list[InvalidInput | Unavailable] = []
    limiter = anyio.CapacityLimiter(_ANCHOR_IN_FLIGHT)

    async def anchor(labeled: _LabeledJob) -> None:
        spec = labeled.job.spec
        passages = {p.id: p for p in pool_context(spec).passages}
        tiers = _tier_lists(labeled.job)
        grading = PairGrader(
            grader,
            storage,
            spending,
            tenant=tenant,
            rubric=spec.rubric,
            seed=anchoring.seed,
            max_in_flight=1,
        )

        async def grade_tier(index: int) -> int:
            pair = Pair(labeled.query_id, spec.query, passages[tiers[index][0]], f"{field}.judge")
            reply = (await grading.grade(pair)).reply
            if reply.grade is not None:
                return reply.grade
            assert reply.failure is not None
            where = f"{labeled.job.name}, candidate {pair.passage.id!r}"
            if reply.failure.kind is FailureKind.CLIENT_ERROR:
                raise InvalidInput([FieldViolation(f"{field}.judge", f"{where}: {reply.failure}")])
            raise Unavailable(
                f"pointwise grading failed for {where}: {reply.failure}", _RETRY_AFTER_S
            )

        def grade_of(index: int) -> int:
            return anyio.from_thread.run(grade_tier, index)

        try:
            anchored = await anyio.to_thread.run_sync(
                anchor_tier_grades, len(tiers), grade_of, limiter=limiter
            )
        except (InvalidInput, Unavailable) as error:
            errors.append(error)
            return
        grades = {
            doc: grade for tier, grade in zip(tiers, anchored.grades, strict=True) for doc in tier
        }
        qrels[labeled.query_id] = grades
        reports[labeled.query_id] = _report(
            labeled, grades, judge_calls=anchored.calls, non_monotone=anchored.non_monotone
        )

    async with anyio.create_task_group() as group:
        for labeled in jobs:
            group.start_soon(anchor, labeled)
    if errors:
        raise errors[0]
    order = [labeled.query_id for labeled in jobs]
    return {q: qrels[q] for q in order}, [reports[q] for q in order]
