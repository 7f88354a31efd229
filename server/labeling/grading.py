"""Grading (query, passage) pairs with a pointwise grader, through the verdict cache.

A cached grade is the same question to the same grader (identity includes the prompt version)
answered before: it is reused and costs nothing. Grades are written to the cache as they
arrive, so an interrupted request does not pay again for what it already received.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field

import anyio
import anyio.lowlevel

from tierank.server.errors import FieldViolation, InvalidInput
from tierank.server.judges.base import JudgeConfigError, JudgeUsage, Passage
from tierank.server.judges.graders import Grader, GradeReply, GradeRequest, UngradablePassage
from tierank.server.judges.registry import JudgeFactory
from tierank.server.storage.base import VerdictCache
from tierank.server.tenancy.paid_call import PaidCalls, call_seed
from tierank.server.tenancy.provider_accounts import ProviderAccounts
from tierank.server.tenancy.spending import SpendLedger
from tierank.server.wire.common import usage_total
from tierank.server.wire.specs import judge_config
from tierank.v1 import eval_pb2, rank_pb2


@dataclass(frozen=True)
class Pair:
    query_id: str
    query: str
    passage: Passage
    # The request field the pair came from, for an error about its data.
    field: str = "pairs"


@dataclass(frozen=True)
class GradedPair:
    pair: Pair
    reply: GradeReply
    cached: bool


@dataclass
class GradingTally:
    calls: int = 0
    cached_calls: int = 0
    failed_calls: int = 0
    usage: list[JudgeUsage] = field(default_factory=list)

    def add(self, graded: GradedPair) -> None:
        self.add_call(graded.reply.usage, graded.reply.failure is not None, graded.cached)

    def add_call(self, usage: JudgeUsage, failed: bool, cached: bool = False) -> None:
        self.calls += 1
        self.cached_calls += cached
        self.failed_calls += failed
        if not cached:
            self.usage.append(usage)

    def absorb(self, other: GradingTally) -> None:
        self.calls += other.calls
        self.cached_calls += other.cached_calls
        self.failed_calls += other.failed_calls
        self.usage.extend(other.usage)

    def to_proto(self) -> eval_pb2.GradingStats:
        return eval_pb2.GradingStats(
            calls=self.calls,
            cached_calls=self.cached_calls,
            failed_calls=self.failed_calls,
            usage=usage_total(self.usage),
        )


def progress_of(planned_calls: int, tallies: Sequence[GradingTally]) -> eval_pb2.OperationProgress:
    """An operation's progress: the calls it plans, and those its tallies counted so far."""
    return eval_pb2.OperationProgress(
        planned_calls=planned_calls,
        done_calls=sum(t.calls for t in tallies),
        failed_calls=sum(t.failed_calls for t in tallies),
        cached_calls=sum(t.cached_calls for t in tallies),
        usage=usage_total([u for t in tallies for u in t.usage]),
    )


async def build_grader(
    field_name: str,
    judge: rank_pb2.JudgeSpec,
    factory: JudgeFactory,
    accounts: ProviderAccounts,
    tenant: str,
) -> Grader:
    """A grader for the request's judge spec, on the tenant's own provider key where it has
    one; a spec that cannot work is INVALID_ARGUMENT."""
    found = await accounts.resolve(tenant, [(f"{field_name}.provider", judge.provider)])
    with judge_errors(field_name):
        return factory.build_grader(judge_config(judge), found.get(judge.provider))


@contextmanager
def judge_errors(field_name: str) -> Iterator[None]:
    """A judge (or grader) that cannot be built for this request is INVALID_ARGUMENT naming
    `field_name`, or the field of it that is wrong."""
    try:
        yield
    except JudgeConfigError as error:
        raise InvalidInput([FieldViolation(f"{field_name}.{error.field}", error.rule)]) from None
    except ValueError as error:
        raise InvalidInput([FieldViolation(field_name, str(error))]) from None


class PairGrader:
    """Grades pairs for one tenant with one grader, at most `max_in_flight` calls at once."""

    def __init__(
        self,
        grader: Grader,
        storage: VerdictCache,
        spending: SpendLedger,
        *,
        tenant: str,
        rubric: str,
        seed: int,
        max_in_flight: int,
        deadline: float | None = None,
    ) -> None:
        """`deadline`: on the `time.monotonic()` clock; a grade asked after it fails at once."""
        self._grader = grader
        self._deadline = deadline
        self._paid = PaidCalls(storage, spending, tenant)
        self._rubric = rubric
        self._seed = seed
        self._max_in_flight = max_in_flight
        self._slots = anyio.Semaphore(max_in_flight)
        self.tally = GradingTally()

    async def grade(self, pair: Pair) -> GradedPair:
        request = GradeRequest(
            query=pair.query,
            rubric=self._rubric,
            passage=pair.passage,
            seed=call_seed(self._seed, f"{pair.query_id}/{pair.passage.id}"),
            deadline=self._deadline,
        )
        async with self._slots:
            try:
                grade = await self._paid.grade(self._grader, request)
            except UngradablePassage as error:
                raise InvalidInput([FieldViolation(pair.field, str(error))]) from None
        graded = GradedPair(pair, grade.reply, cached=grade.cached)
        self.tally.add(graded)
        return graded

    async def grade_all(self, pairs: Sequence[Pair]) -> list[GradedPair]:
        """Every pair, `max_in_flight` at a time, results in the order given.

        A few workers take the pairs in turn, each pair its own step on the event loop, so
        that 100,000 pairs never queue 100,000 tasks (nor their storage calls) ahead of other
        clients, and a cancelled request (its client gone, its deadline passed) stops at the
        next pair.
        """
        results: list[GradedPair | None] = [None] * len(pairs)
        unclaimed = iter(range(len(pairs)))  # shared: each worker takes the next pair

        async def worker() -> None:
            for index in unclaimed:
                # A grader that answers without waiting (the oracle, a cached grade) still
                # lets the loop serve others, and still sees a cancellation, between pairs.
                await anyio.lowlevel.checkpoint()
                results[index] = await self.grade(pairs[index])

        # An error of one pair reaches the client through the task group's exception group
        # (the interceptor reports its first error that has a status of its own).
        async with anyio.create_task_group() as group:
            for _ in range(min(self._max_in_flight, len(pairs))):
                group.start_soon(worker)
        return [r for r in results if r is not None]
