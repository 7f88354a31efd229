"""The one paid judge call: jobs, grading, filling and qualification all ask a judge through here.

Every call goes the same way: the judge learns what its cache identity depends on (`prepare`),
the verdict cache answers if it can (free), the call's worst case is reserved against the
tenant's daily limits (QuotaExceeded before anything is sent), the judge is asked, the answer
is checked, and the reservation is settled at what the provider reported. A caller that stores
the answer durably (a job) settles in the same transaction as the answer, so a paid answer and
its bill are never apart; a call that ends without an answer (cancelled, a crash of the
caller's write) is settled at its reservation, since the provider may have charged for it.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import anyio
import structlog

from tierank.server.judges.base import (
    BatchRequest,
    FailureKind,
    Judge,
    JudgeFailure,
    JudgeReply,
    JudgeUsage,
    Passage,
)
from tierank.server.judges.graders import Grader, GradeReply, GradeRequest, UngradablePassage
from tierank.server.judges.verdict_cache import cache_key, decode_ordering, encode_ordering
from tierank.server.storage.base import CacheEntry, Settlement, Spend, VerdictCache
from tierank.server.tenancy.spending import SpendLedger, spend_of

_Written = TypeVar("_Written")
_Reply = TypeVar("_Reply", JudgeReply, GradeReply)

# Makes one storage write, retrying it as the caller needs (a job waits out a full disk).
Durably = Callable[[Callable[[], Awaitable[_Written]]], Awaitable[_Written]]


async def written_once(write: Callable[[], Awaitable[_Written]]) -> _Written:
    """A write made once: a request that cannot store fails with the storage error."""
    return await write()


def call_seed(seed: int, call_id: str) -> int:
    """The seed a call sends its judge: the same call of the same job or request always gets
    the same one, different calls different ones."""
    digest = hashlib.sha256(f"{seed}:{call_id}".encode()).digest()
    return int.from_bytes(digest[:8], "big")


@dataclass(frozen=True)
class Answer:
    """A listwise judge's answer as the paid call returns it; `reply.ordering` names only
    passages of the batch, each once (else the reply is a failed one)."""

    reply: JudgeReply
    cached: bool
    # For the verdict cache, stored with the answer (empty when cached or not cacheable).
    cache: tuple[CacheEntry, ...]
    # What settles the call's reservation; None when nothing was reserved (a cached answer).
    settlement: Settlement | None


# Stores an answer before the paid call returns it, settlement and cache entries included,
# in one write (a job's commit). Without one, the paid call settles and caches by itself.
Keep = Callable[[Answer], Awaitable[None]]


@dataclass(frozen=True)
class Grade:
    reply: GradeReply
    cached: bool


class PaidCalls:
    """Judge calls for one tenant, paid for through its spend ledger."""

    def __init__(
        self,
        storage: VerdictCache,
        spending: SpendLedger,
        tenant: str,
        durably: Durably = written_once,
        log: Any = None,
    ) -> None:
        """`log`: the caller's logger, with its ids bound (a judge that raises is logged)."""
        self._storage = storage
        self._spending = spending
        self._tenant = tenant
        self._durably = durably
        self._log = log or structlog.get_logger().bind(tenant=tenant)

    async def judge(
        self, judge: Judge, request: BatchRequest, keep: Keep | None = None, cache: bool = True
    ) -> Answer:
        """Ask `judge` to order `request`'s batch. A judge that raises gives a failed reply (a
        judge bug fails one call, not the caller); QuotaExceeded before a call is sent.
        `cache`: whether the verdict cache may answer and keep the answer."""
        await judge.prepare()  # what a self-hosted server says it serves is in the cache key
        key = None
        if cache and judge.cacheable:
            key = self._key(judge.cache_identity(), request.rubric, request.query, request.passages)
            stored = await self._storage.cache_get(key)
            if stored is not None:
                answer = Answer(
                    JudgeReply(decode_ordering(stored, request.passages)), True, (), None
                )
                await (keep or _nothing_to_keep)(answer)
                return answer

        async def ask() -> JudgeReply:
            try:
                reply = await judge.judge(request)
            except Exception as error:  # a judge bug must not take its caller down
                self._log.exception("judge raised", judge=judge.name, call_id=request.call_id)
                failure = JudgeFailure(FailureKind.SERVER_ERROR, repr(error))
                reply = JudgeReply((), failure=failure)
            return checked(reply, [p.id for p in request.passages])

        def entries(reply: JudgeReply) -> tuple[CacheEntry, ...]:
            if key is None or reply.failed:
                return ()
            return (CacheEntry(key, encode_ordering(reply.ordering, request.passages)),)

        async def keep_answer(reply: JudgeReply, settlement: Settlement) -> None:
            answer = Answer(reply, False, entries(reply), settlement)
            if keep is not None:
                await keep(answer)
            else:
                await self._settle_and_cache(settlement, answer.cache)

        reply, settlement = await self._paid(judge.name, judge.estimate(request), ask, keep_answer)
        return Answer(reply, False, entries(reply), settlement)

    async def grade(self, grader: Grader, request: GradeRequest) -> Grade:
        """Ask `grader` to grade one pair; UngradablePassage (the request's own data) is
        raised and costs nothing."""
        await grader.prepare()
        key = None
        if grader.cacheable:
            key = self._key(
                grader.cache_identity(), request.rubric, request.query, (request.passage,)
            )
            stored = await self._storage.cache_get(key)
            if stored is not None:
                return Grade(GradeReply(json.loads(stored)["grade"]), cached=True)

        async def keep_grade(reply: GradeReply, settlement: Settlement) -> None:
            cached: tuple[CacheEntry, ...] = ()
            if key is not None and reply.grade is not None:
                cached = (CacheEntry(key, json.dumps({"grade": reply.grade}).encode()),)
            await self._settle_and_cache(settlement, cached)

        reply, _ = await self._paid(
            grader.name, grader.estimate(request), lambda: grader.grade(request), keep_grade
        )
        return Grade(reply, cached=False)

    def _key(self, identity: str, rubric: str, query: str, shown: Sequence[Passage]) -> str:
        return cache_key(self._tenant, identity, rubric, query, shown)

    async def _paid(
        self,
        judge: str,
        worst_case: JudgeUsage,
        ask: Callable[[], Awaitable[_Reply]],
        keep: Callable[[_Reply, Settlement], Awaitable[None]],
    ) -> tuple[_Reply, Settlement]:
        reservation = await self._durably(
            lambda: self._spending.reserve(self._tenant, judge, worst_case)
        )
        spent: Spend | None = None  # unknown until the judge answers: settled as reserved
        settled = False
        try:
            try:
                reply = await ask()
            except UngradablePassage:
                spent = Spend()  # refused before any request was sent
                raise
            spent = spend_of(reply.usage, reply.failure)
            settlement = self._spending.settlement(reservation, spent)
            await keep(reply, settlement)
            settled = True
            return reply, settlement
        finally:
            if not settled:
                # Shielded: a call cancelled mid-flight is still settled (at its reservation).
                with anyio.CancelScope(shield=True):
                    unsettled = self._spending.settlement(reservation, spent)
                    await self._durably(lambda: self._spending.settle(unsettled))

    async def _settle_and_cache(
        self, settlement: Settlement, entries: Sequence[CacheEntry]
    ) -> None:
        await settle_and_cache(self._spending, self._storage, settlement, entries, self._durably)


async def settle_and_cache(
    spending: SpendLedger,
    storage: VerdictCache,
    settlement: Settlement | None,
    entries: Sequence[CacheEntry],
    durably: Durably = written_once,
) -> None:
    """Settle an answer's call and keep it in the verdict cache, where no caller stores the
    answer with its bill (a grading request's, or one whose job lost its lease)."""
    if settlement is not None:
        await durably(lambda: spending.settle(settlement))
    if entries:
        await durably(lambda: storage.cache_put(list(entries)))


async def _nothing_to_keep(_: Answer) -> None:
    return None


def checked(reply: JudgeReply, presented: Sequence[str]) -> JudgeReply:
    """A reply naming ids outside its batch, or one twice, is a failed reply, never votes."""
    if reply.failed:
        return reply
    ordering = reply.ordering
    if len(set(ordering)) != len(ordering) or not set(presented).issuperset(ordering):
        failure = JudgeFailure(FailureKind.UNPARSEABLE, "ordering names ids outside the batch")
        return JudgeReply((), reply.usage, failure, reply.prompt, reply.raw_text)
    return reply
