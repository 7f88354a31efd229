"""The one paid judge call (server/tenancy/paid_call.py) on real SQLite storage: what it answers,
what it checks, and that every call it sends is settled once, whatever happens to it."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import anyio
import pytest

from tierank.server.errors import QuotaExceeded
from tierank.server.judges.base import (
    BatchRequest,
    FailureKind,
    Judge,
    JudgeConfig,
    JudgeReply,
    JudgeUsage,
    Passage,
)
from tierank.server.storage.base import Limits, Spend
from tierank.server.storage.sqlite import SqliteStorage
from tierank.server.tenancy.paid_call import Answer, PaidCalls
from tierank.server.tenancy.spending import SpendLedger, utc_day

WORST_CASE = JudgeUsage(input_tokens=500)
SPENT = JudgeUsage(input_tokens=120, output_tokens=9, cost_usd=0.25)


class ScriptedJudge(Judge):
    """Answers each call with what `answer` returns for it (or raises what it raises)."""

    def __init__(self, answer: Callable[[BatchRequest], Awaitable[JudgeReply]]) -> None:
        super().__init__(JudgeConfig(provider="scripted", model="m1"))
        self._answer = answer
        self.calls = 0

    def cache_identity(self) -> str:
        return "scripted/m1"

    def estimate(self, request: BatchRequest) -> JudgeUsage:
        return WORST_CASE

    async def judge(self, request: BatchRequest) -> JudgeReply:
        self.calls += 1
        return await self._answer(request)


def _request(*ids: str, texts: tuple[str, ...] = ("first text", "second text")) -> BatchRequest:
    return BatchRequest(
        call_id="c1",
        query="q",
        rubric="r",
        passages=tuple(Passage(i, text) for i, text in zip(ids, texts, strict=True)),
    )


@pytest.fixture
async def storage(tmp_path: Path) -> AsyncIterator[SqliteStorage]:
    opened = SqliteStorage(tmp_path / "paid.db", synchronous="NORMAL")
    yield opened
    await opened.close()


def _paid(storage: SqliteStorage) -> PaidCalls:
    return PaidCalls(storage, SpendLedger(storage, "replica-1"), "acme")


async def _today(storage: SqliteStorage) -> tuple[dict[str, Spend], Spend]:
    report = await storage.usage("acme", utc_day())
    return report.today, report.reserved


async def test_an_answer_is_settled_at_its_usage_and_asked_again_from_the_cache(storage):
    async def answer(request: BatchRequest) -> JudgeReply:
        return JudgeReply(("b", "a"), SPENT)

    judge = ScriptedJudge(answer)
    first = await _paid(storage).judge(judge, _request("a", "b"))
    assert (first.reply.ordering, first.cached) == (("b", "a"), False)
    assert await _today(storage) == ({"scripted/m1": Spend(1, 120, 9, 0.25)}, Spend())

    # The same texts under other ids: the cached positions, mapped onto the asking ids; free.
    again = await _paid(storage).judge(judge, _request("x", "y"))
    assert (again.reply.ordering, again.cached, again.settlement) == (("y", "x"), True, None)
    assert judge.calls == 1
    assert await _today(storage) == ({"scripted/m1": Spend(1, 120, 9, 0.25)}, Spend())
    # Asked not to use the cache (a qualification), the judge is asked and paid again.
    await _paid(storage).judge(judge, _request("a", "b"), cache=False)
    assert judge.calls == 2


@pytest.mark.parametrize(
    "ordering", [("a", "a"), ("a", "z")], ids=["an id twice", "an id outside the batch"]
)
async def test_an_ordering_outside_the_rules_fails_the_call_and_is_still_paid(storage, ordering):
    async def answer(request: BatchRequest) -> JudgeReply:
        return JudgeReply(ordering, SPENT, prompt="p", raw_text="raw")

    answer_ = await _paid(storage).judge(ScriptedJudge(answer), _request("a", "b"))
    assert answer_.reply.failed and answer_.reply.failure is not None
    assert answer_.reply.failure.kind == FailureKind.UNPARSEABLE
    assert (answer_.reply.ordering, answer_.reply.raw_text, answer_.cache) == ((), "raw", ())
    assert await _today(storage) == ({"scripted/m1": Spend(1, 120, 9, 0.25)}, Spend())


async def test_a_judge_that_raises_gives_a_failed_reply(storage):
    async def answer(request: BatchRequest) -> JudgeReply:
        raise RuntimeError("bug in a judge")

    answer_ = await _paid(storage).judge(ScriptedJudge(answer), _request("a", "b"))
    assert answer_.reply.failure is not None
    assert answer_.reply.failure.kind == FailureKind.SERVER_ERROR
    assert "bug in a judge" in answer_.reply.failure.message
    assert await _today(storage) == ({"scripted/m1": Spend(calls=1)}, Spend())


async def test_past_a_daily_limit_nothing_is_sent(storage):
    await storage.put_tenant("acme", Limits(daily_input_tokens=400), [], None, now=1.0)
    judge = ScriptedJudge(lambda request: pytest.fail("sent past the limit"))
    with pytest.raises(QuotaExceeded):
        await _paid(storage).judge(judge, _request("a", "b"))
    assert judge.calls == 0
    assert await _today(storage) == ({}, Spend())


async def test_a_call_cancelled_in_flight_is_settled_at_its_reservation(storage):
    started = anyio.Event()

    async def answer(request: BatchRequest) -> JudgeReply:
        started.set()
        await anyio.sleep_forever()
        raise AssertionError

    async with anyio.create_task_group() as group:
        group.start_soon(_paid(storage).judge, ScriptedJudge(answer), _request("a", "b"))
        await started.wait()
        assert (await _today(storage))[1] == Spend(calls=1, input_tokens=500)
        group.cancel_scope.cancel()
    assert await _today(storage) == ({"scripted/m1": Spend(calls=1, input_tokens=500)}, Spend())


async def test_a_keeper_settles_with_the_answer_and_one_that_fails_still_settles(storage):
    async def answer(request: BatchRequest) -> JudgeReply:
        return JudgeReply(("a", "b"), SPENT)

    kept: list[Answer] = []

    async def keep(answer_: Answer) -> None:
        kept.append(answer_)  # the settlement is the keeper's to store: nothing settled yet
        assert (await _today(storage))[1] == Spend(calls=1, input_tokens=500)
        assert answer_.settlement is not None
        await storage.settle_spend(answer_.settlement.reservation_id, answer_.settlement.actual)

    await _paid(storage).judge(ScriptedJudge(answer), _request("a", "b"), keep)
    assert [k.cache for k in kept] != [()] and kept[0].settlement is not None
    assert await _today(storage) == ({"scripted/m1": Spend(1, 120, 9, 0.25)}, Spend())

    async def failing_keep(answer_: Answer) -> None:
        raise OSError("could not store")

    with pytest.raises(OSError):
        await _paid(storage).judge(
            ScriptedJudge(answer), _request("c", "d", texts=("x", "y")), failing_keep
        )
    # Settled at what the provider reported, although the answer could not be stored.
    assert await _today(storage) == ({"scripted/m1": Spend(2, 240, 18, 0.5)}, Spend())
