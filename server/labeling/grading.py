"""Grading (query, passage) pairs with a pointwise grader, through the verdict cache.

A cached grade is the same question to the same grader (identity includes the prompt version)
answered before: it is reused and costs nothing. Grades are written to the cache as they
arrive, so an interrupted request does not pay again for what it already received.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field

import anyio

from tierank.server.errors import FieldViolation, invalid_argument
from tierank.server.jobs.convert import judge_config
from tierank.server.jobs.runner import call_seed
from tierank.server.judges.base import JudgeConfigError, JudgeUsage, Passage
from tierank.server.judges.graders import Grader, GradeReply, GradeRequest, UngradablePassage
from tierank.server.judges.registry import JudgeFactory
from tierank.server.judges.verdict_cache import cache_key
from tierank.server.storage.base import CacheEntry, Spend, Storage
from tierank.server.tenancy.provider_accounts import ProviderAccounts
from tierank.server.tenancy.spending import SpendLedger, spend_of
from tierank.v1 import rank_pb2


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
        self.calls += 1
        self.cached_calls += graded.cached
        self.failed_calls += graded.reply.failure is not None
        if not graded.cached:
            self.usage.append(graded.reply.usage)


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
    try:
        return factory.build_grader(judge_config(judge), found.get(judge.provider))
    except JudgeConfigError as error:
        raise invalid_argument(
            [FieldViolation(f"{field_name}.{error.field}", error.rule)]
        ) from None
    except ValueError as error:
        raise invalid_argument([FieldViolation(field_name, str(error))]) from None


class PairGrader:
    """Grades pairs for one tenant with one grader, at most `max_in_flight` calls at once."""

    def __init__(
        self,
        grader: Grader,
        storage: Storage,
        *,
        tenant: str,
        rubric: str,
        seed: int,
        max_in_flight: int,
    ) -> None:
        self._grader = grader
        self._storage = storage
        self._tenant = tenant
        self._rubric = rubric
        self._seed = seed
        self._slots = anyio.Semaphore(max_in_flight)
        self._spending = SpendLedger(storage)
        self.tally = GradingTally()

    async def grade(self, pair: Pair) -> GradedPair:
        grader = self._grader
        key = None
        await grader.prepare()
        if grader.cacheable:
            key = cache_key(
                self._tenant, grader.cache_identity(), self._rubric, pair.query, (pair.passage,)
            )
            stored = await self._storage.cache_get(key)
            if stored is not None:
                graded = GradedPair(pair, GradeReply(json.loads(stored)["grade"]), cached=True)
                self.tally.add(graded)
                return graded
        request = GradeRequest(
            query=pair.query,
            rubric=self._rubric,
            passage=pair.passage,
            seed=call_seed(self._seed, f"{pair.query_id}/{pair.passage.id}"),
        )
        async with self._slots:
            reservation = await self._spending.reserve(
                self._tenant, grader.name, grader.estimate(request)
            )
            spent: Spend | None = None
            try:
                reply = await grader.grade(request)
                spent = spend_of(reply.usage, reply.failure)
            except UngradablePassage as error:
                spent = Spend()
                raise invalid_argument([FieldViolation(pair.field, str(error))]) from None
            finally:
                # Shielded: a call cancelled mid-flight is still settled (at its reservation).
                with anyio.CancelScope(shield=True):
                    await self._spending.settle(reservation, spent)
        if key is not None and reply.grade is not None:
            payload = json.dumps({"grade": reply.grade}).encode()
            await self._storage.cache_put([CacheEntry(key, payload)])
        graded = GradedPair(pair, reply, cached=False)
        self.tally.add(graded)
        return graded

    async def grade_all(self, pairs: Sequence[Pair]) -> list[GradedPair]:
        """Every pair, concurrently, results in the order given."""
        results: list[GradedPair | None] = [None] * len(pairs)

        async def one(index: int) -> None:
            results[index] = await self.grade(pairs[index])

        # An ApiError of one pair reaches the client through the task group's exception group
        # (the interceptor reports its first ApiError).
        async with anyio.create_task_group() as group:
            for index in range(len(pairs)):
                group.start_soon(one, index)
        return [r for r in results if r is not None]
