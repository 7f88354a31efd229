"""EvalService over grpc.aio: scoring, label agreement, qrels export and pointwise grading.

Thin translation between requests and `tierank.evaluation`; labels from tiers come from
`tier_labeling`, pointwise grades from `grading`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping, Sequence
from functools import partial
from typing import Protocol

import anyio
import anyio.lowlevel
import anyio.to_thread
import grpc

from tierank.evaluation import (
    Evaluation,
    Measure,
    Qrels,
    Run,
    binary_kappa,
    cohen_kappa,
    confusion_matrix,
    evaluate,
    format_qrels,
    kendall_tau_b,
    rank_biased_overlap,
    spearman_rho,
)
from tierank.limits import (
    DEFAULT_FILL_DEPTH,
    DEFAULT_RBO_PERSISTENCE,
    DEFAULT_RELEVANCE_THRESHOLD,
    MAX_HELD_IN_SAMPLE,
    MAX_PAIRS,
)
from tierank.server.errors import FieldViolation, InvalidInput
from tierank.server.jobs.operations import OperationManager
from tierank.server.judges.registry import JudgeFactory
from tierank.server.judges.rubric_presets import POINTWISE, current_presets, resolve_rubric
from tierank.server.labeling.filling import (
    held_in_agreement,
    held_in_sample,
    run_tops,
    unjudged,
)
from tierank.server.labeling.grading import (
    GradedPair,
    Pair,
    PairGrader,
    build_grader,
    progress_of,
)
from tierank.server.labeling.tier_labeling import LabelingStore, tier_labels
from tierank.server.rpc.auth import current_caller
from tierank.server.rpc.eval_inputs import (
    as_passage,
    read_max_in_flight,
    read_measures,
    read_passages,
    read_qrels,
    read_runs,
    read_topics,
)
from tierank.server.rpc.operation_requests import (
    OperationRequestStore,
    Operations,
    PreparedWork,
)
from tierank.server.rpc.qualify_requests import Qualifier, QualifierStore
from tierank.server.storage.base import OperationRecord
from tierank.server.tenancy.provider_accounts import ProviderAccounts
from tierank.server.tenancy.quotas import EvalSlots
from tierank.server.tenancy.spending import SpendLedger
from tierank.server.wire.common import usage_total
from tierank.server.wire.operations import FILL_QRELS, QUALIFY_JUDGE, operation_view
from tierank.server.wire.specs import passage_of
from tierank.v1 import eval_pb2, eval_pb2_grpc

EVAL_SERVICE = eval_pb2.DESCRIPTOR.services_by_name["EvalService"].full_name
# Pairs read or answered in one step on the event loop: a request of MAX_PAIRS takes a few
# hundred short steps, so other clients are served in between.
PAIRS_PER_STEP = 500


class EvalStore(QualifierStore, LabelingStore, OperationRequestStore, Protocol):
    """What EvalService uses of storage: qualifications, the jobs it labels from, the verdict
    cache its grading goes through, and its long-running operations."""


class EvalServicer(eval_pb2_grpc.EvalServiceServicer):
    def __init__(
        self,
        storage: EvalStore,
        factory: JudgeFactory,
        accounts: ProviderAccounts,
        spending: SpendLedger,
        operations: OperationManager,
    ) -> None:
        self._storage = storage
        self._factory = factory
        self._accounts = accounts
        self._spending = spending
        self._qualifier = Qualifier(storage, factory, accounts, spending)
        self._operations = Operations(operations, storage)
        self._heavy = EvalSlots()

    # -- long requests, as operations -----------------------------------------------------------

    async def QualifyJudge(
        self, request: eval_pb2.QualifyJudgeRequest, context: grpc.aio.ServicerContext
    ) -> eval_pb2.Qualification:
        result = await self._operations.result(await self._start_qualify(request))
        assert isinstance(result, eval_pb2.Qualification)
        return result

    async def StartQualifyJudge(
        self, request: eval_pb2.QualifyJudgeRequest, context: grpc.aio.ServicerContext
    ) -> eval_pb2.Operation:
        return operation_view(await self._start_qualify(request))

    async def _start_qualify(self, request: eval_pb2.QualifyJudgeRequest) -> OperationRecord:
        return await self._operations.start(
            QUALIFY_JUDGE, request, lambda: self._qualifier.prepare(request)
        )

    async def FillQrels(
        self, request: eval_pb2.FillQrelsRequest, context: grpc.aio.ServicerContext
    ) -> eval_pb2.FillQrelsResponse:
        result = await self._operations.result(await self._start_fill(request))
        assert isinstance(result, eval_pb2.FillQrelsResponse)
        return result

    async def StartFillQrels(
        self, request: eval_pb2.FillQrelsRequest, context: grpc.aio.ServicerContext
    ) -> eval_pb2.Operation:
        return operation_view(await self._start_fill(request))

    async def _start_fill(self, request: eval_pb2.FillQrelsRequest) -> OperationRecord:
        return await self._operations.start(
            FILL_QRELS, request, lambda: self._prepare_fill(request)
        )

    async def GetOperation(
        self, request: eval_pb2.GetOperationRequest, context: grpc.aio.ServicerContext
    ) -> eval_pb2.Operation:
        return await self._operations.get(request)

    async def ListOperations(
        self, request: eval_pb2.ListOperationsRequest, context: grpc.aio.ServicerContext
    ) -> eval_pb2.ListOperationsResponse:
        return await self._operations.list(request)

    async def CancelOperation(
        self, request: eval_pb2.CancelOperationRequest, context: grpc.aio.ServicerContext
    ) -> eval_pb2.Operation:
        return await self._operations.cancel(request)

    async def WatchOperation(
        self, request: eval_pb2.WatchOperationRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[eval_pb2.Operation]:
        async for operation in self._operations.watch(request):
            yield operation

    async def ListQualifications(
        self, request: eval_pb2.ListQualificationsRequest, context: grpc.aio.ServicerContext
    ) -> eval_pb2.ListQualificationsResponse:
        return await self._qualifier.list(request)

    async def DeleteQualification(
        self, request: eval_pb2.DeleteQualificationRequest, context: grpc.aio.ServicerContext
    ) -> eval_pb2.Qualification:
        return await self._qualifier.delete(request)

    async def ListRubrics(
        self, request: eval_pb2.ListRubricsRequest, context: grpc.aio.ServicerContext
    ) -> eval_pb2.ListRubricsResponse:
        return eval_pb2.ListRubricsResponse(
            presets=[
                eval_pb2.RubricPreset(
                    name=p.name,
                    version=p.version,
                    kind=p.kind,
                    description=p.description,
                    text=p.text,
                )
                for p in current_presets()
            ]
        )

    async def _labels(
        self, field: str, source: eval_pb2.LabelSource
    ) -> tuple[Qrels, list[eval_pb2.LabelingReport]]:
        kind = source.WhichOneof("source")
        if kind == "qrels":
            return read_qrels(f"{field}.qrels", source.qrels), []
        if kind == "tiers":
            return await tier_labels(
                f"{field}.tiers",
                source.tiers,
                self._storage,
                self._factory,
                self._accounts,
                self._spending,
                current_caller().tenant,
            )
        raise InvalidInput([FieldViolation(field, "give either qrels or tiers")])

    async def Evaluate(
        self, request: eval_pb2.EvaluateRequest, context: grpc.aio.ServicerContext
    ) -> eval_pb2.EvaluateResponse:
        measures = read_measures("measures", request.measures)
        if request.max_docs < 0:
            raise InvalidInput([FieldViolation("max_docs", "must not be negative")])
        if not request.runs:
            raise InvalidInput([FieldViolation("runs", "must hold at least one run")])
        runs = read_runs("runs", request.runs)
        with self._heavy.hold(current_caller().tenant):
            qrels, labeling = await self._labels("labels", request.labels)
            response = eval_pb2.EvaluateResponse(labeling=labeling)
            for name, run in runs:
                # Off the event loop, a run at a time: large runs neither hold the loop nor
                # outlive a cancelled request by more than one run.
                result = await anyio.to_thread.run_sync(
                    partial(
                        evaluate,
                        measures,
                        qrels,
                        run,
                        all_queries=request.all_queries,
                        max_docs=request.max_docs or None,
                        na_as_zero=request.na_as_zero,
                    )
                )
                response.runs.append(_run_evaluation(name, result, request.per_query))
        return response

    async def CompareLabels(
        self, request: eval_pb2.CompareLabelsRequest, context: grpc.aio.ServicerContext
    ) -> eval_pb2.CompareLabelsResponse:
        threshold = request.relevance_threshold or DEFAULT_RELEVANCE_THRESHOLD
        persistence = request.rbo_persistence or DEFAULT_RBO_PERSISTENCE
        if not 0 < persistence < 1:
            raise InvalidInput([FieldViolation("rbo_persistence", "must be in (0, 1)")])
        (measure,) = read_measures("measure", [request.measure] if request.measure else [])
        runs = read_runs("runs", request.runs)
        with self._heavy.hold(current_caller().tenant):
            a, labeling_a = await self._labels("a", request.a)
            b, labeling_b = await self._labels("b", request.b)
            response = await anyio.to_thread.run_sync(_label_agreement, a, b, threshold)
            response.labeling.extend(labeling_a + labeling_b)
            if runs:
                systems = await anyio.to_thread.run_sync(
                    _system_agreement, measure, a, b, runs, persistence
                )
                response.systems.CopyFrom(systems)
        return response

    async def ExportQrels(
        self, request: eval_pb2.ExportQrelsRequest, context: grpc.aio.ServicerContext
    ) -> eval_pb2.ExportQrelsResponse:
        qrels, labeling = await tier_labels(
            "tiers",
            request.tiers,
            self._storage,
            self._factory,
            self._accounts,
            self._spending,
            current_caller().tenant,
        )
        return eval_pb2.ExportQrelsResponse(qrels=format_qrels(qrels), labeling=labeling)

    async def GradePairs(
        self, request: eval_pb2.GradePairsRequest, context: grpc.aio.ServicerContext
    ) -> eval_pb2.GradePairsResponse:
        with self._heavy.hold(current_caller().tenant):
            pairs = await _read_pairs(request.pairs)
            grading = await self._pair_grader(request)
            graded = await grading.grade_all(pairs)
            grades = await _pair_grades(graded)
        return eval_pb2.GradePairsResponse(grades=grades, stats=grading.tally.to_proto())

    async def _prepare_fill(self, request: eval_pb2.FillQrelsRequest) -> PreparedWork:
        """Check the request and build its grader, spending nothing; the filling to run."""
        if request.depth < 0:
            raise InvalidInput([FieldViolation("depth", "must not be negative")])
        if not 0 <= request.held_in_sample <= MAX_HELD_IN_SAMPLE:
            raise InvalidInput(
                [FieldViolation("held_in_sample", f"must be between 0 and {MAX_HELD_IN_SAMPLE}")]
            )
        qrels = read_qrels("qrels", request.qrels)
        if not request.runs:
            raise InvalidInput([FieldViolation("runs", "must hold at least one run")])
        runs = read_runs("runs", request.runs)
        topics = read_topics("topics", request.topics)
        passages = read_passages("passages", request.passages)
        tops = run_tops(runs, request.depth or DEFAULT_FILL_DEPTH)
        holes = unjudged(qrels, tops)
        missing = [f"{q} {d}" for q, d in holes if q not in topics or d not in passages]
        if missing:
            raise InvalidInput(
                [
                    FieldViolation(
                        "topics" if missing[0].split()[0] not in topics else "passages",
                        f"no text for {len(missing)} holes to grade, e.g. {missing[:3]}",
                    )
                ]
            )
        held_in = held_in_sample(
            qrels,
            tops,
            request.held_in_sample,
            request.seed,
            lambda q, d: q in topics and d in passages,
        )
        pairs = [
            Pair(q, topics[q], as_passage(passages[d]), "passages") for q, d in holes + held_in
        ]
        _check_pair_count("runs", len(pairs))
        grading = await self._pair_grader(request)

        async def fill() -> eval_pb2.FillQrelsResponse:
            # One batch: held-in pairs share the holes' call slots, spending checks and seeds.
            graded = await grading.grade_all(pairs)
            filled, graded_held_in = graded[: len(holes)], graded[len(holes) :]
            added = "".join(
                f"{g.pair.query_id} 0 {g.pair.passage.id} {g.reply.grade}\n"
                for g in filled
                if g.reply.grade is not None
            )
            original = request.qrels.content
            separator = "" if not original or original.endswith("\n") else "\n"
            response = eval_pb2.FillQrelsResponse(
                qrels=original + separator + added,
                added=await _pair_grades(filled),
                stats=grading.tally.to_proto(),
            )
            if request.held_in_sample:
                response.held_in.CopyFrom(
                    held_in_agreement(
                        [qrels[q][d] for q, d in held_in],
                        [g.reply.grade for g in graded_held_in],
                    )
                )
            return response

        return PreparedWork(lambda: progress_of(len(pairs), [grading.tally]), fill)

    async def _pair_grader(
        self, request: eval_pb2.GradePairsRequest | eval_pb2.FillQrelsRequest
    ) -> PairGrader:
        max_in_flight = read_max_in_flight("max_in_flight", request)
        rubric, _ = resolve_rubric("rubric", request.rubric, POINTWISE)
        tenant = current_caller().tenant
        return PairGrader(
            await build_grader("judge", request.judge, self._factory, self._accounts, tenant),
            self._storage,
            self._spending,
            tenant=tenant,
            rubric=rubric,
            seed=request.seed,
            max_in_flight=max_in_flight,
        )


# -- scoring ------------------------------------------------------------------------------------


def _run_evaluation(name: str, result: Evaluation, per_query: bool) -> eval_pb2.RunEvaluation:
    evaluation = eval_pb2.RunEvaluation(run=name)
    for measure, aggregate in result.aggregate.items():
        evaluation.aggregates.append(
            eval_pb2.MeasureAggregate(
                measure=str(measure), mean=aggregate.mean, count=aggregate.count, na=aggregate.na
            )
        )
        if per_query:
            evaluation.per_query.extend(
                eval_pb2.QueryValue(measure=str(measure), query_id=qid, value=value)
                for qid, value in result.per_query[measure].items()
            )
    return evaluation


# -- agreement ----------------------------------------------------------------------------------


def _label_agreement(a: Qrels, b: Qrels, threshold: int) -> eval_pb2.CompareLabelsResponse:
    pairs_a = {(q, d): g for q, judged in a.items() for d, g in judged.items()}
    pairs_b = {(q, d): g for q, judged in b.items() for d, g in judged.items()}
    shared = sorted(pairs_a.keys() & pairs_b.keys())
    grades_a = [pairs_a[p] for p in shared]
    grades_b = [pairs_b[p] for p in shared]
    grades = sorted(set(grades_a) | set(grades_b))
    matrix = confusion_matrix(grades_a, grades_b, grades)
    return eval_pb2.CompareLabelsResponse(
        shared_pairs=len(shared),
        only_a=len(pairs_a) - len(shared),
        only_b=len(pairs_b) - len(shared),
        kappa=cohen_kappa(grades_a, grades_b, categories=grades),
        linear_weighted_kappa=cohen_kappa(grades_a, grades_b, "linear", grades),
        quadratic_weighted_kappa=cohen_kappa(grades_a, grades_b, "quadratic", grades),
        binary_kappa=binary_kappa(grades_a, grades_b, threshold),
        relevance_threshold=threshold,
        confusion=eval_pb2.ConfusionMatrix(
            grades=grades,
            rows=[eval_pb2.ConfusionRow(counts=row) for row in matrix.counts],
        ),
    )


def _system_agreement(
    measure: Measure,
    a: Qrels,
    b: Qrels,
    runs: Sequence[tuple[str, Run]],
    persistence: float,
) -> eval_pb2.SystemAgreement:
    queries = a.keys() & b.keys()
    if not queries:
        raise InvalidInput([FieldViolation("b", "labels no query that a labels too")])

    def mean(labels: Mapping[str, Mapping[str, int]], run: Run) -> float | None:
        restricted = {q: labels[q] for q in queries}
        return evaluate([measure], restricted, run).aggregate[measure].mean

    scores = [(name, mean(a, run), mean(b, run)) for name, run in runs]
    # Systems without a score (no shared query in the run) cannot be placed in either ordering.
    scored = [(n, sa, sb) for n, sa, sb in scores if sa is not None and sb is not None]
    x = [sa for _, sa, _ in scored]
    y = [sb for _, _, sb in scored]
    order_a = [n for n, _, _ in sorted(scored, key=lambda s: (-s[1], s[0]))]
    order_b = [n for n, _, _ in sorted(scored, key=lambda s: (-s[2], s[0]))]
    rbo = rank_biased_overlap(order_a, order_b, persistence)
    return eval_pb2.SystemAgreement(
        measure=str(measure),
        query_count=len(queries),
        systems=[eval_pb2.SystemScore(run=n, score_a=sa, score_b=sb) for n, sa, sb in scores],
        kendall_tau_b=kendall_tau_b(x, y) if len(scored) > 1 else None,
        spearman_rho=spearman_rho(x, y) if len(scored) > 1 else None,
        rbo_persistence=persistence,
        rbo_extrapolated=rbo.extrapolated,
        rbo_lower_bound=rbo.lower_bound,
    )


# -- pointwise grading --------------------------------------------------------------------------


async def _read_pairs(pairs: Sequence[eval_pb2.GradePair]) -> list[Pair]:
    violations: list[FieldViolation] = []
    if not pairs:
        violations.append(FieldViolation("pairs", "must hold at least one pair"))
    _check_pair_count("pairs", len(pairs))
    read: list[Pair] = []
    for i, pair in enumerate(pairs):
        if i % PAIRS_PER_STEP == 0:
            await anyio.lowlevel.checkpoint()
        if not pair.query.strip():
            violations.append(FieldViolation(f"pairs[{i}].query", "must not be empty"))
        if not pair.passage.id:
            violations.append(FieldViolation(f"pairs[{i}].passage.id", "must not be empty"))
        if not pair.passage.text.strip():
            violations.append(FieldViolation(f"pairs[{i}].passage.text", "must not be empty"))
        read.append(
            Pair(
                pair.query_id, pair.query, passage_of(pair.passage), f"pairs[{i}].passage.metadata"
            )
        )
    if violations:
        raise InvalidInput(violations)
    return read


def _check_pair_count(field: str, count: int) -> None:
    if count > MAX_PAIRS:
        raise InvalidInput(
            [FieldViolation(field, f"at most {MAX_PAIRS} pairs per request, got {count}")]
        )


async def _pair_grades(graded: Sequence[GradedPair]) -> list[eval_pb2.PairGrade]:
    """The grades as messages, a step at a time: up to MAX_PAIRS of them must not hold the
    event loop in one piece."""
    grades: list[eval_pb2.PairGrade] = []
    for step in range(0, len(graded), PAIRS_PER_STEP):
        await anyio.lowlevel.checkpoint()
        grades.extend(_pair_grade(g) for g in graded[step : step + PAIRS_PER_STEP])
    return grades


def _pair_grade(graded: GradedPair) -> eval_pb2.PairGrade:
    reply = graded.reply
    return eval_pb2.PairGrade(
        query_id=graded.pair.query_id,
        doc_id=graded.pair.passage.id,
        grade=reply.grade,
        cached=graded.cached,
        failure_reason=str(reply.failure) if reply.failure else "",
        usage=usage_total([] if graded.cached else [reply.usage]),
    )
