"""QualifyJudge, ListQualifications and DeleteQualification: requests read and checked at the
edge, the work done by `labeling.qualify`, the result stored for the caller's tenant."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from tierank import limits
from tierank.server.errors import FieldViolation, InvalidInput, NotFound
from tierank.server.judges.base import Judge, PoolContext
from tierank.server.judges.registry import JudgeFactory
from tierank.server.judges.rubric_presets import LISTWISE, resolve_rubric
from tierank.server.labeling.grading import GradingTally, PairGrader, judge_errors, progress_of
from tierank.server.labeling.qualify import (
    LabelledSet,
    QualifySettings,
    ask_batches,
    draw_batches,
    grade_pointwise,
    planned_calls,
    qualification,
)
from tierank.server.names import BadName, parse_qualification_name
from tierank.server.rpc.auth import current_caller
from tierank.server.rpc.eval_inputs import (
    as_passage,
    read_max_in_flight,
    read_passages,
    read_qrels,
    read_runs,
    read_topics,
)
from tierank.server.rpc.operation_requests import PreparedWork
from tierank.server.storage.base import QualificationStore, VerdictCache
from tierank.server.tenancy.paid_call import PaidCalls
from tierank.server.tenancy.provider_accounts import ProviderAccounts
from tierank.server.tenancy.spending import SpendLedger
from tierank.server.wire.specs import judge_config
from tierank.v1 import eval_pb2

QUALIFICATION_TYPE = "tierank.v1.Qualification"
# (field, default, low, high) of the request's sizes.
_RANGES = (
    ("batch_size", limits.DEFAULT_BATCH_SIZE, limits.MIN_BATCH_SIZE, limits.MAX_BATCH_SIZE),
    ("shuffles", limits.DEFAULT_SHUFFLES, limits.MIN_SHUFFLES, limits.MAX_SHUFFLES),
    ("max_queries", limits.DEFAULT_QUALIFY_QUERIES, 1, limits.MAX_QUALIFY_QUERIES),
    ("batches_per_query", limits.DEFAULT_BATCHES_PER_QUERY, 1, limits.MAX_BATCHES_PER_QUERY),
    (
        "relevance_threshold",
        limits.DEFAULT_RELEVANCE_THRESHOLD,
        limits.MIN_RELEVANCE_THRESHOLD,
        limits.MAX_RELEVANCE_THRESHOLD,
    ),
)


class QualifierStore(QualificationStore, VerdictCache, Protocol):
    """Qualifications, and the verdict cache the qualifying calls go through."""


@dataclass
class Qualifier:
    storage: QualifierStore
    factory: JudgeFactory
    accounts: ProviderAccounts
    spending: SpendLedger

    async def prepare(self, request: eval_pb2.QualifyJudgeRequest) -> PreparedWork:
        """Check the request and build its judges, spending nothing: bad input fails here, at
        the start. Returns the qualification to run, and its progress."""
        tenant = current_caller().tenant
        rubric, preset = resolve_rubric("rubric", request.rubric, LISTWISE)
        settings = _settings(request, rubric)
        labels = _labelled_set(request)
        batches = draw_batches(labels, settings)
        if not batches:
            raise InvalidInput(
                [
                    FieldViolation(
                        "qrels",
                        "no query has documents of two different grades with texts in "
                        "passages and a topic: nothing to measure accuracy on",
                    )
                ]
            )
        found = await self.accounts.resolve(tenant, [("judge.provider", request.judge.provider)])
        account = found.get(request.judge.provider)
        config = judge_config(request.judge)
        with judge_errors("judge"):
            identity = await self.factory.identity(config, account)

        def judge_for(pool: PoolContext) -> Judge:
            # Some judges check the pool they are built for (the oracle's scores).
            with judge_errors("judge"):
                return self.factory.build(config, pool, account)

        grading = None
        if request.pointwise:
            # Built before any call, so that a grader that cannot work costs nothing.
            with judge_errors("judge"):
                grader = self.factory.build_grader(config, account)
            grading = PairGrader(
                grader,
                self.storage,
                self.spending,
                tenant=tenant,
                rubric=settings.rubric,
                seed=settings.seed,
                max_in_flight=settings.max_in_flight,
            )
        listwise_tally = GradingTally()
        tallies = [listwise_tally] + ([grading.tally] if grading is not None else [])
        planned = planned_calls(batches, settings, grading is not None)

        async def run() -> eval_pb2.Qualification:
            listwise = await ask_batches(
                batches,
                labels,
                settings,
                judge_for,
                PaidCalls(self.storage, self.spending, tenant),
                listwise_tally,
            )
            pointwise = None
            if grading is not None:
                pointwise = await grade_pointwise(
                    batches, labels, grading, settings.relevance_threshold
                )
            qualified = qualification(
                tenant=tenant,
                judge=request.judge,
                judge_identity=identity,
                rubric_preset=preset,
                settings=settings,
                batches=batches,
                labels=labels,
                listwise=listwise,
                pointwise=pointwise,
            )
            await self.storage.put_qualification(qualified.record)
            return qualified.message

        return PreparedWork(lambda: progress_of(planned, tallies), run)

    async def list(
        self, request: eval_pb2.ListQualificationsRequest
    ) -> eval_pb2.ListQualificationsResponse:
        if request.page_size < 0:
            raise InvalidInput([FieldViolation("page_size", "must not be negative")])
        records = await self.storage.list_qualifications(
            current_caller().tenant,
            request.judge_identity or None,
            min(request.page_size or limits.DEFAULT_PAGE_SIZE, limits.MAX_QUALIFICATIONS_PAGE_SIZE),
        )
        return eval_pb2.ListQualificationsResponse(
            qualifications=[eval_pb2.Qualification.FromString(r.payload) for r in records]
        )

    async def delete(self, request: eval_pb2.DeleteQualificationRequest) -> eval_pb2.Qualification:
        try:
            qualification_id = parse_qualification_name(request.name)
        except BadName as bad:
            raise InvalidInput([FieldViolation("name", str(bad))]) from None
        record = await self.storage.delete_qualification(current_caller().tenant, qualification_id)
        if record is None:
            raise NotFound(request.name, QUALIFICATION_TYPE)
        return eval_pb2.Qualification.FromString(record.payload)


def _settings(request: eval_pb2.QualifyJudgeRequest, rubric: str) -> QualifySettings:
    values: dict[str, int] = {}
    violations = []
    for field, default, low, high in _RANGES:
        value = getattr(request, field) or default
        if not low <= value <= high:
            violations.append(FieldViolation(field, f"must be between {low} and {high}"))
        values[field] = value
    if violations:
        raise InvalidInput(violations)
    return QualifySettings(
        seed=request.seed,
        max_in_flight=read_max_in_flight("max_in_flight", request),
        rubric=rubric,
        **values,
    )


def _labelled_set(request: eval_pb2.QualifyJudgeRequest) -> LabelledSet:
    grades = read_qrels("qrels", request.qrels)
    topics = read_topics("topics", request.topics)
    passages = {
        doc: as_passage(c) for doc, c in read_passages("passages", request.passages).items()
    }
    run = None
    if request.HasField("run"):
        ((_, scores),) = read_runs("run", [request.run])
        run = {query: sorted(docs, key=lambda d: (-docs[d], d)) for query, docs in scores.items()}
    return LabelledSet(grades=grades, topics=topics, passages=passages, run=run)
