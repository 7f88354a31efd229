"""Qualifying a judge: real listwise calls on a small human-labelled set, in several shuffles,
and (optionally) pointwise grades of the same passages, measured against the human grades.

Batches are drawn per query so that each mixes human grades (a batch of one grade says nothing
about accuracy), and each batch is shown in `shuffles` orders: the shuffles measure position
bias and self-consistency, and the human grades measure pair accuracy. The verdict cache is not
used for listwise calls: a qualification measures the judge, not what it said before.
"""

from __future__ import annotations

import math
import random
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import anyio

from tierank.server.judges.base import (
    BatchRequest,
    Judge,
    Passage,
    PoolContext,
)
from tierank.server.labeling.grading import GradingTally, Pair, PairGrader
from tierank.server.labeling.qualify_stats import (
    ListwiseAnswer,
    judge_verdict,
    listwise_quality,
    pointwise_quality,
)
from tierank.server.names import new_sortable_id, qualification_name
from tierank.server.storage.base import QualificationRecord
from tierank.server.tenancy.paid_call import PaidCalls, call_seed
from tierank.v1 import eval_pb2, rank_pb2


@dataclass(frozen=True)
class LabelledSet:
    """Human labels and the texts they are about, read and checked at the API edge."""

    grades: dict[str, dict[str, int]]  # query id -> doc id -> grade
    topics: dict[str, str]
    passages: dict[str, Passage]
    # Each query's documents in a run's order, best first; None: draw from the judged ones.
    run: dict[str, list[str]] | None = None


@dataclass(frozen=True)
class QualifySettings:
    batch_size: int
    shuffles: int
    max_queries: int
    batches_per_query: int
    seed: int
    max_in_flight: int
    rubric: str
    relevance_threshold: int


@dataclass(frozen=True)
class Batch:
    query_id: str
    batch_id: int
    docs: tuple[str, ...]


def draw_batches(labels: LabelledSet, settings: QualifySettings) -> list[Batch]:
    """Up to `batches_per_query` batches of `batch_size` per query, for the first
    `max_queries` queries (in qrels order) that have two grades among documents with texts.

    Documents are dealt round-robin over the grades present (each grade's documents in run
    order, or shuffled by the seed), so that every batch mixes grades; none is shown in two
    batches of one query."""
    batches: list[Batch] = []
    queries = 0
    for query_id, judged in labels.grades.items():
        if queries == settings.max_queries:
            break
        if query_id not in labels.topics:
            continue
        by_grade = _documents_by_grade(query_id, judged, labels, settings.seed)
        if len(by_grade) < 2:
            continue
        queries += 1
        dealt = _deal(by_grade)
        for batch_id in range(settings.batches_per_query):
            docs = dealt[batch_id * settings.batch_size : (batch_id + 1) * settings.batch_size]
            if len({judged[d] for d in docs}) < 2:
                break
            batches.append(Batch(query_id, batch_id, tuple(docs)))
    return batches


def _documents_by_grade(
    query_id: str, judged: dict[str, int], labels: LabelledSet, seed: int
) -> dict[int, list[str]]:
    if labels.run is not None:
        order = [d for d in labels.run.get(query_id, []) if d in judged]
    else:
        order = sorted(judged)
        random.Random(f"{seed}/{query_id}").shuffle(order)
    by_grade: dict[int, list[str]] = defaultdict(list)
    for doc in order:
        if doc in labels.passages:
            by_grade[judged[doc]].append(doc)
    return dict(sorted(by_grade.items(), reverse=True))


def _deal(by_grade: dict[int, list[str]]) -> list[str]:
    """One document of each grade in turn, until all are dealt."""
    queues = [list(docs) for docs in by_grade.values()]
    dealt = []
    while any(queues):
        for queue in queues:
            if queue:
                dealt.append(queue.pop(0))
    return dealt


def shown_order(batch: Batch, shuffle: int, seed: int) -> tuple[str, ...]:
    docs = list(batch.docs)
    random.Random(f"{seed}/{batch.query_id}/{batch.batch_id}/{shuffle}").shuffle(docs)
    return tuple(docs)


@dataclass
class _Listwise:
    answers: list[ListwiseAnswer]
    tally: GradingTally


def planned_calls(batches: Sequence[Batch], settings: QualifySettings, pointwise: bool) -> int:
    """The calls a qualification makes: every batch in every shuffle, and with `pointwise`
    one grade of every passage shown."""
    graded = len(_shown_pairs(batches)) if pointwise else 0
    return len(batches) * settings.shuffles + graded


async def ask_batches(
    batches: Sequence[Batch],
    labels: LabelledSet,
    settings: QualifySettings,
    judge_for: Callable[[PoolContext], Judge],
    paid: PaidCalls,
    tally: GradingTally,
) -> _Listwise:
    """Every batch in every shuffle, at most `max_in_flight` calls at once, counted in `tally`
    as they land (progress can be read from it meanwhile). A judge is built per query (some
    judges know the whole pool) and closed when its calls are done."""
    result = _Listwise([], tally)
    slots = anyio.CapacityLimiter(settings.max_in_flight)
    by_query: dict[str, list[Batch]] = defaultdict(list)
    for batch in batches:
        by_query[batch.query_id].append(batch)

    async def ask(judge: Judge, batch: Batch, shuffle: int) -> None:
        shown = shown_order(batch, shuffle, settings.seed)
        call_id = f"{batch.query_id}/b{batch.batch_id}/s{shuffle}"
        request = BatchRequest(
            call_id=call_id,
            query=labels.topics[batch.query_id],
            rubric=settings.rubric,
            passages=tuple(labels.passages[d] for d in shown),
            seed=call_seed(settings.seed, call_id),
        )
        async with slots:
            # Never from the verdict cache: a qualification measures how the judge answers now
            # (a cached answer would hide its variance across shuffles and runs).
            reply = (await paid.judge(judge, request, cache=False)).reply
        ordering = () if reply.failed else reply.ordering
        result.tally.add_call(reply.usage, failed=not ordering)
        result.answers.append(
            ListwiseAnswer(
                query_id=batch.query_id,
                batch_id=batch.batch_id,
                shuffle=shuffle,
                shown=shown,
                ranked=tuple(ordering),
                failed=not ordering,
            )
        )

    async def query(query_id: str, its_batches: list[Batch]) -> None:
        docs = sorted({d for b in its_batches for d in b.docs})
        pool = PoolContext(
            labels.topics[query_id],
            settings.rubric,
            tuple(labels.passages[d] for d in docs),
            settings.seed,
        )
        judge = judge_for(pool)
        try:
            async with anyio.create_task_group() as calls:
                for batch in its_batches:
                    for shuffle in range(settings.shuffles):
                        calls.start_soon(ask, judge, batch, shuffle)
        finally:
            await judge.aclose()

    async with anyio.create_task_group() as queries:
        for query_id, its_batches in by_query.items():
            queries.start_soon(query, query_id, its_batches)
    result.answers.sort(key=lambda a: (a.query_id, a.batch_id, a.shuffle))
    return result


async def grade_pointwise(
    batches: Sequence[Batch], labels: LabelledSet, grading: PairGrader, threshold: int
) -> tuple[eval_pb2.PointwiseQuality, GradingTally]:
    """Every shown passage graded once, against its human grade."""
    shown = _shown_pairs(batches)
    pairs = [
        Pair(query_id, labels.topics[query_id], labels.passages[doc], "passages")
        for query_id, doc in shown
    ]
    graded = await grading.grade_all(pairs)
    compared = [
        (labels.grades[g.pair.query_id][g.pair.passage.id], g.reply.grade)
        for g in graded
        if g.reply.grade is not None
    ]
    return pointwise_quality(compared, threshold), grading.tally


@dataclass(frozen=True)
class Qualified:
    message: eval_pb2.Qualification
    record: QualificationRecord


def qualification(
    *,
    tenant: str,
    judge: rank_pb2.JudgeSpec,
    judge_identity: str,
    rubric_preset: str,
    settings: QualifySettings,
    batches: Sequence[Batch],
    labels: LabelledSet,
    listwise: _Listwise,
    pointwise: tuple[eval_pb2.PointwiseQuality, GradingTally] | None,
) -> Qualified:
    """The report and the row that stores it."""
    quality = listwise_quality(listwise.answers, labels.grades, settings.batch_size)
    usable, weight, verdict = judge_verdict(quality)
    # A new tally: the listwise one may still be read for progress.
    tally = GradingTally()
    tally.absorb(listwise.tally)
    if pointwise is not None:
        tally.absorb(pointwise[1])
    latencies = [u.latency_s for u in tally.usage]
    qualification_id = new_sortable_id()
    now = time.time()
    message = eval_pb2.Qualification(
        name=qualification_name(qualification_id),
        judge=judge,
        judge_identity=judge_identity,
        query_count=len({b.query_id for b in batches}),
        listwise=quality,
        pointwise=pointwise[0] if pointwise is not None else None,
        cost=tally.to_proto(),
        mean_latency_seconds=math.fsum(latencies) / len(latencies) if latencies else 0.0,
        usable=usable,
        verdict=verdict,
        weight=weight,
        rubric_preset=rubric_preset,
    )
    message.create_time.FromNanoseconds(int(now * 1e9))
    record = QualificationRecord(
        qualification_id=qualification_id,
        tenant=tenant,
        judge_identity=judge_identity,
        create_time=now,
        usable=usable,
        weight=weight,
        payload=message.SerializeToString(),
    )
    return Qualified(message, record)


def _shown_pairs(batches: Sequence[Batch]) -> list[tuple[str, str]]:
    """Every (query id, passage id) the batches show, once each, in order."""
    return sorted({(b.query_id, d) for b in batches for d in b.docs})
