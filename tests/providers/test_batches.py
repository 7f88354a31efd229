"""Provider batch transports, through each vendor's real SDK, against the batch APIs' fakes."""

from __future__ import annotations

import asyncio
import functools
import itertools
import random
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import replace
from typing import Any

import pytest
from batch_fakes import BATCH_FLAVORS, FakeBatch, FakeBatchServer
from fakes import MODELS, Answer, HttpError, Recorded, rank_by_score, settings_for

from tierank.server.judges.base import (
    BatchRequest,
    FailureKind,
    JudgeConfig,
    JudgeReply,
    Passage,
    PoolContext,
)
from tierank.server.judges.batches import transport_for
from tierank.server.judges.batches.anthropic_batches import SUBMIT_WINDOW_S
from tierank.server.judges.batches.base import (
    BatchCall,
    BatchCallFailure,
    BatchFailureKind,
    BatchLimits,
    BatchOutcome,
    BatchPhase,
    BatchStatus,
    BatchTransport,
    poll_delay,
    poll_once,
)
from tierank.server.judges.llm import LLMJudge
from tierank.server.judges.registry import JudgeFactory
from tierank.server.judges.retry import CallError
from tierank.server.judges.settings import BatchSettings

flavors = pytest.mark.parametrize("flavor", BATCH_FLAVORS)
MakeTransport = Callable[..., BatchTransport[Any]]
# The error type each vendor reports for a request answered with HTTP 500.
SERVER_ERROR_TYPE = {"openai": "fake_error", "anthropic": "api_error", "gemini": "500"}
# Our id of a batch, as the journal gives it.
LABEL = "study-1-wave-0"


def call(n: int, scores: tuple[int, ...] = (3, 9, 1, 5), poison: bool = False) -> BatchCall:
    """Call n: passages whose text carries the score the fake ranks by."""
    passages = tuple(
        Passage(f"q{n}-d{i}", f"Passage {i} of query {n}{' poison' if poison else ''}, score {s}.")
        for i, s in enumerate(scores)
    )
    request = BatchRequest(f"q{n}/c0", f"query {n}", "Relevant if it scores high.", passages, n)
    return BatchCall(f"call-{n}", request)


def best_first(batch_call: BatchCall) -> tuple[str, ...]:
    passages = batch_call.request.passages
    return tuple(p.id for p in sorted(passages, key=lambda p: -int(p.text.split()[-1][:-1])))


def ranks_unless_poisoned(recorded: Recorded) -> Answer | HttpError:
    if "poison" in recorded.prompt:
        return HttpError(500, message="the model crashed on this one")
    return rank_by_score(recorded)


@pytest.fixture
async def fake() -> AsyncIterator[FakeBatchServer]:
    async with FakeBatchServer() as server:
        for flavor in BATCH_FLAVORS:
            server.respond_with(flavor, ranks_unless_poisoned)
        yield server


@pytest.fixture
async def factory(fake: FakeBatchServer) -> AsyncIterator[JudgeFactory]:
    factory = JudgeFactory(settings_for(fake))
    yield factory
    await factory.aclose()


def judge_of(factory: JudgeFactory, flavor: str) -> LLMJudge:
    judge = factory.build(
        JudgeConfig(provider=flavor, model=MODELS[flavor]), PoolContext("", "", ())
    )
    assert isinstance(judge, LLMJudge)
    return judge


DEFAULT_POLLING = BatchSettings()


async def polled_to_the_end(
    transport: BatchTransport[Any], batch_id: str, policy: BatchSettings = DEFAULT_POLLING
) -> tuple[list[BatchStatus], list[float]]:
    """Every status of the batch until it is no longer open, and the waits asked for between
    polls (not waited)."""
    statuses: list[BatchStatus] = []
    waits: list[float] = []
    rng = random.Random(1)
    for attempt in itertools.count():
        status, wait = await poll_once(transport, batch_id, attempt, policy, rng)
        if status is not None:
            statuses.append(status)
            if status.phase is not BatchPhase.OPEN:
                return statuses, waits
        waits.append(wait)
    raise AssertionError("unreachable")


async def run(
    transport: BatchTransport[Any], calls: list[BatchCall]
) -> tuple[list[BatchStatus], dict[str, BatchOutcome]]:
    """Submits `calls` as one batch, polls it to its end, returns every status and the results."""
    batch_id = await transport.submit(calls, LABEL)
    statuses, _ = await polled_to_the_end(transport, batch_id)
    assert statuses[-1].phase is BatchPhase.ENDED, statuses[-1]
    return statuses, await transport.results(batch_id, calls)


@flavors
async def test_a_batch_is_polled_through_its_open_states_and_matched_back_by_custom_id(
    flavor: str, fake: FakeBatchServer, factory: JudgeFactory
) -> None:
    calls = [call(n, scores=(n, 7, 2 * n % 5, 4)) for n in range(1, 6)]
    statuses, outcomes = await run(transport_for(judge_of(factory, flavor)), calls)

    assert [s.phase for s in statuses] == [BatchPhase.OPEN, BatchPhase.OPEN, BatchPhase.ENDED]
    open_status, ended_status = statuses[0].vendor_status, statuses[-1].vendor_status
    assert (open_status, ended_status) == {
        "openai": ("validating", "completed"),
        "anthropic": ("in_progress", "ended"),
        "gemini": ("JOB_STATE_PENDING", "JOB_STATE_SUCCEEDED"),
    }[flavor]
    # The fake wrote its results in the reverse of the submitted order.
    (batch,) = fake.batches.values()
    assert list(batch.outcomes or {}) == [c.custom_id for c in reversed(calls)]
    for batch_call in calls:
        reply = outcomes[batch_call.custom_id]
        assert isinstance(reply, JudgeReply) and not reply.failed, reply
        assert reply.ordering == best_first(batch_call)
        assert reply.usage.input_tokens > 0 and reply.usage.cost_usd > 0
    # The vendor's own counts, under its own names (the SDK reads none for Gemini).
    assert (
        statuses[-1].counts
        == {
            "openai": {"total": 5, "completed": 5, "failed": 0},
            "anthropic": {
                "processing": 0,
                "succeeded": 5,
                "errored": 0,
                "canceled": 0,
                "expired": 0,
            },
            "gemini": {},
        }[flavor]
    )


@flavors
async def test_a_batch_answer_equals_the_call_by_call_answer_at_half_the_price(
    flavor: str, fake: FakeBatchServer, factory: JudgeFactory
) -> None:
    judge = judge_of(factory, flavor)
    calls = [call(1), call(2, scores=(8, 2, 6))]
    _, outcomes = await run(transport_for(judge), calls)
    for batch_call in calls:
        batched = outcomes[batch_call.custom_id]
        single = await judge.judge(batch_call.request)
        assert isinstance(batched, JudgeReply) and not single.failed
        assert batched.ordering == single.ordering
        assert (batched.prompt, batched.raw_text) == (single.prompt, single.raw_text)
        assert batched.usage.input_tokens == single.usage.input_tokens
        assert batched.usage.output_tokens == single.usage.output_tokens
        assert batched.usage.cost_usd == pytest.approx(single.usage.cost_usd / 2)
    # The same body went to the vendor both ways (the batch's entries, then the single calls).
    sent = fake.requests(flavor)
    assert [r.body for r in sent[:2]] == [r.body for r in sent[2:]]


@flavors
async def test_failed_and_expired_requests_are_reported_per_call_never_answered(
    flavor: str, fake: FakeBatchServer, factory: JudgeFactory
) -> None:
    calls = [call(1), call(2, poison=True), call(3), call(4)]
    fake.quirks[flavor].expire = frozenset({"call-3"})
    statuses, outcomes = await run(transport_for(judge_of(factory, flavor)), calls)

    assert (
        statuses[-1].vendor_status
        == {
            "openai": "expired",
            "anthropic": "ended",
            "gemini": "JOB_STATE_EXPIRED",
        }[flavor]
    )
    for answered in ("call-1", "call-4"):
        reply = outcomes[answered]
        assert isinstance(reply, JudgeReply) and not reply.failed
    errored = outcomes["call-2"]
    assert isinstance(errored, BatchCallFailure)
    assert (errored.kind, errored.error_type) == (
        BatchFailureKind.ERRORED,
        SERVER_ERROR_TYPE[flavor],
    )
    assert "crashed on this one" in errored.message
    expired = outcomes["call-3"]
    assert isinstance(expired, BatchCallFailure) and expired.kind is BatchFailureKind.EXPIRED


@flavors
async def test_a_batch_that_expires_whole_answers_no_call(
    flavor: str, fake: FakeBatchServer, factory: JudgeFactory
) -> None:
    fake.quirks[flavor].expire = True
    _, outcomes = await run(transport_for(judge_of(factory, flavor)), [call(1), call(2)])
    assert all(
        isinstance(o, BatchCallFailure) and o.kind is BatchFailureKind.EXPIRED
        for o in outcomes.values()
    ), outcomes
    assert fake.requests(flavor) == []  # nothing was run


async def test_openai_results_are_read_only_once_the_output_file_is_written(
    fake: FakeBatchServer, factory: JudgeFactory
) -> None:
    fake.quirks["openai"].late_files_polls = 2
    calls = [call(1), call(2)]
    statuses, outcomes = await run(transport_for(judge_of(factory, "openai")), calls)
    assert [(s.vendor_status, s.phase) for s in statuses[2:]] == [
        ("completed", BatchPhase.OPEN),
        ("completed", BatchPhase.OPEN),
        ("completed", BatchPhase.ENDED),
    ]
    assert all(isinstance(o, JudgeReply) and not o.failed for o in outcomes.values())


@flavors
async def test_a_cancelled_batch_keeps_what_was_answered_and_cancels_the_rest(
    flavor: str, fake: FakeBatchServer, factory: JudgeFactory
) -> None:
    fake.quirks[flavor].answered_before_cancel = 1
    transport = transport_for(judge_of(factory, flavor))
    calls = [call(1), call(2), call(3)]
    batch_id = await transport.submit(calls, LABEL)
    assert (await transport.poll(batch_id)).phase is BatchPhase.OPEN
    await transport.cancel(batch_id)
    cancelling = await transport.poll(batch_id)
    assert cancelling.phase is BatchPhase.OPEN
    ended = await transport.poll(batch_id)
    assert (cancelling.vendor_status, ended.vendor_status) == {
        "openai": ("cancelling", "cancelled"),
        "anthropic": ("canceling", "ended"),
        "gemini": ("JOB_STATE_RUNNING", "JOB_STATE_CANCELLED"),
    }[flavor]
    assert ended.phase is BatchPhase.ENDED
    outcomes = await transport.results(batch_id, calls)
    first = outcomes["call-1"]
    assert isinstance(first, JudgeReply) and first.ordering == best_first(calls[0])
    for cancelled in ("call-2", "call-3"):
        outcome = outcomes[cancelled]
        assert isinstance(outcome, BatchCallFailure), outcome
        assert outcome.kind is BatchFailureKind.CANCELLED


@flavors
async def test_payloads_are_split_within_the_request_and_byte_limits(
    flavor: str, fake: FakeBatchServer, factory: JudgeFactory
) -> None:
    judge = judge_of(factory, flavor)
    calls = [call(n) for n in range(1, 8)]
    fake.quirks[flavor].max_requests = 3
    fake.quirks[flavor].open_polls = 0
    by_count = transport_for(judge, BatchLimits(3, 10**9, "test"))
    payloads = by_count.payloads(calls)
    assert [len(p) for p in payloads] == [3, 3, 1]
    assert [c for p in payloads for c in p] == calls
    answered: dict[str, BatchOutcome] = {}
    for payload in payloads:
        answered |= (await run(by_count, payload))[1]
    assert {k: o.ordering for k, o in answered.items() if isinstance(o, JudgeReply)} == {
        c.custom_id: best_first(c) for c in calls
    }
    # By bytes: room for two entries (and the payload's own overhead) but not three.
    entry = by_count.entry_bytes(calls[0])
    by_bytes = transport_for(judge, BatchLimits(None, 1024 + 2 * entry + entry // 2, "test"))
    assert [len(p) for p in by_bytes.payloads(calls)] == [2, 2, 2, 1]
    too_small = transport_for(judge, BatchLimits(None, entry, "test"))
    with pytest.raises(ValueError, match=r"more than a \w+ batch may carry"):
        too_small.payloads(calls)


async def test_anthropic_refuses_custom_ids_outside_its_pattern(factory: JudgeFactory) -> None:
    transport = transport_for(judge_of(factory, "anthropic"))
    bad = BatchCall("q1/b0/s1", call(1).request)
    with pytest.raises(ValueError, match="1 to 64 letters, digits"):
        transport.payloads([bad])
    with pytest.raises(ValueError, match="unique"):
        transport.payloads([call(1), call(1)])


def test_poll_delays_grow_to_their_cap_with_jitter_below_the_nominal_value() -> None:
    policy = BatchSettings(first_poll_s=10, max_poll_s=60, poll_multiplier=2, poll_jitter=0.25)
    rng = random.Random(5)
    delays = [poll_delay(attempt, policy, rng) for attempt in (0, 1, 2, 3, 4, 5, 10_000)]
    nominal = [10, 20, 40, 60, 60, 60, 60]
    assert all(0.75 * n <= d <= n for d, n in zip(delays, nominal, strict=True)), delays
    assert len(set(delays[3:])) == 4  # jittered, not one fixed cap


@flavors
async def test_results_beyond_one_answers_byte_cap_are_read(
    flavor: str, fake: FakeBatchServer, factory: JudgeFactory
) -> None:
    """Twelve answers of 100 kB: more than the 1 MiB one call's answer may take, as a real
    batch's results are."""

    def long_answer(recorded: Recorded) -> Answer:
        answer = rank_by_score(recorded)
        return replace(answer, text=answer.text + " " * 100_000)

    fake.respond_with(flavor, long_answer)
    calls = [call(n) for n in range(12)]
    _, outcomes = await run(transport_for(judge_of(factory, flavor)), calls)
    assert {k: o.ordering for k, o in outcomes.items() if isinstance(o, JudgeReply)} == {
        c.custom_id: best_first(c) for c in calls
    }


@flavors
async def test_polls_refused_with_429_are_waited_out_for_at_least_their_retry_after(
    flavor: str, fake: FakeBatchServer, factory: JudgeFactory
) -> None:
    fake.quirks[flavor].refused_polls = 2
    fake.quirks[flavor].retry_after_s = 7
    transport = transport_for(judge_of(factory, flavor))
    batch_id = await transport.submit([call(1)], LABEL)
    policy = BatchSettings(first_poll_s=1, max_poll_s=2)
    statuses, waits = await polled_to_the_end(transport, batch_id, policy)
    assert statuses[-1].phase is BatchPhase.ENDED
    # Two refused polls, then two open ones and the one that finds it ended.
    assert len(waits) == 4 and min(waits[:2]) >= 7 and max(waits[2:]) <= 2, waits


@pytest.mark.parametrize("flavor", ["openai", "gemini"])
async def test_a_batch_that_fails_whole_is_reported_failed(
    flavor: str, fake: FakeBatchServer, factory: JudgeFactory
) -> None:
    fake.quirks[flavor].fail = "the input could not be read"
    transport = transport_for(judge_of(factory, flavor))
    status = await transport.poll(await transport.submit([call(1)], LABEL))
    assert status.phase is BatchPhase.FAILED
    assert status.vendor_status == {"openai": "failed", "gemini": "JOB_STATE_FAILED"}[flavor]
    if flavor == "openai":  # google-genai reads no error of a Gemini Developer API job
        assert "the input could not be read" in status.message


@flavors
async def test_a_refused_submission_raises_a_classified_error(
    flavor: str, fake: FakeBatchServer, factory: JudgeFactory
) -> None:
    fake.quirks[flavor].max_requests = 1
    transport = transport_for(judge_of(factory, flavor))
    with pytest.raises(CallError) as refused:
        await transport.submit([call(1), call(2)], LABEL)
    assert refused.value.kind is FailureKind.CLIENT_ERROR
    assert "at most 1 requests" in refused.value.message


@flavors
async def test_an_unreadable_batch_answer_fails_as_unparseable_and_keeps_its_text(
    flavor: str, fake: FakeBatchServer, factory: JudgeFactory
) -> None:
    fake.script(flavor, Answer("I would rather not rank these."))
    fake.quirks[flavor].reorder = False
    _, outcomes = await run(transport_for(judge_of(factory, flavor)), [call(1), call(2)])
    unreadable, readable = outcomes["call-1"], outcomes["call-2"]
    assert isinstance(unreadable, JudgeReply) and isinstance(readable, JudgeReply)
    assert unreadable.failure is not None
    assert unreadable.failure.kind is FailureKind.UNPARSEABLE
    assert unreadable.ordering == () and unreadable.raw_text == "I would rather not rank these."
    assert unreadable.usage.output_tokens > 0  # its tokens were spent all the same
    assert readable.ordering == best_first(call(2))


def vendor_id(flavor: str, batch: FakeBatch) -> str:
    """The id a transport gives for the fake's batch (Gemini's is the job's resource name)."""
    return f"batches/{batch.id}" if flavor == "gemini" else batch.id


@flavors
async def test_a_batch_whose_creator_died_before_hearing_its_id_is_found(
    flavor: str, fake: FakeBatchServer, factory: JudgeFactory
) -> None:
    """The vendor holds the batch, its creator is cancelled while waiting for the answer: the
    lookup finds the batch's id, which polls as that batch; a label never submitted finds
    nothing."""
    transport = transport_for(judge_of(factory, flavor))
    journaled_at = time.time()
    other = await transport.submit([call(1)], "other-1")
    fake.quirks[flavor].create_delay_s = 30
    creating = asyncio.create_task(transport.submit([call(2), call(3)], "lost-1"))
    async with asyncio.timeout(5):
        while len(fake.batches) < 2:
            await asyncio.sleep(0.01)
    creating.cancel()
    with pytest.raises(asyncio.CancelledError):
        await creating
    lost = list(fake.batches.values())[-1]
    assert (lost.metadata, lost.display_name) == {
        "openai": ({"tierank_batch": "lost-1"}, ""),
        "anthropic": ({}, ""),  # a Message Batch carries no label
        "gemini": ({}, "lost-1"),
    }[flavor]

    found = await transport.find_submitted("lost-1", journaled_at, 2, known=())
    assert found == vendor_id(flavor, lost)
    assert (await transport.poll(found)).batch_id == found
    if flavor == "anthropic":  # found by its size: none has 3 calls, and `other` is known
        assert await transport.find_submitted("never-1", journaled_at, 3, known=()) is None
        assert await transport.find_submitted("never-1", journaled_at, 1, {other}) is None
    else:
        assert await transport.find_submitted("other-1", journaled_at, 1, ()) == other
        assert await transport.find_submitted("never-1", journaled_at, 2, known=()) is None


@flavors
async def test_a_lookup_pages_through_the_vendors_list(
    flavor: str, fake: FakeBatchServer, factory: JudgeFactory
) -> None:
    fake.quirks[flavor].list_page_max = 2
    fake.quirks[flavor].open_polls = 0
    transport = transport_for(judge_of(factory, flavor))
    journaled_at = time.time()
    ids = [await transport.submit([call(n)], f"b-{n}") for n in range(5)]
    await transport.poll(ids[0])  # listed as ended, with its answers (Gemini's inlined)
    # The oldest of five batches, two per page, newest first: on the third page.
    assert await transport.find_submitted("b-0", journaled_at, 1, known=()) == ids[0]
    assert fake.list_pages[flavor] == 3


@pytest.mark.parametrize("flavor", ["openai", "anthropic"])
async def test_a_lookup_reads_no_further_than_batches_older_than_the_journal_entry(
    flavor: str, fake: FakeBatchServer, factory: JudgeFactory
) -> None:
    """Both list the newest first: the first batch older than the entry (less the clock
    skew) ends the walk, however many older ones follow."""
    fake.quirks[flavor].list_page_max = 2
    transport = transport_for(judge_of(factory, flavor))
    journaled_at = time.time()
    fake.now = lambda: journaled_at - 3600
    for n in range(6):
        await transport.submit([call(n)], f"old-{n}")
    fake.now = lambda: journaled_at + 1
    new = await transport.submit([call(9)], "new-1")
    assert await transport.find_submitted("old-5", journaled_at, 1, known={new}) is None
    assert fake.list_pages[flavor] == 1


async def test_anthropic_finds_the_oldest_unknown_batch_of_the_journaled_size_in_its_window(
    fake: FakeBatchServer, factory: JudgeFactory
) -> None:
    transport = transport_for(judge_of(factory, "anthropic"))
    journaled_at = time.time()
    fake.now = lambda: journaled_at - 1000  # before the window
    await transport.submit([call(1), call(2)], LABEL)
    fake.now = lambda: journaled_at + 5
    first_two = await transport.submit([call(1), call(2)], LABEL)
    three = await transport.submit([call(1), call(2), call(3)], LABEL)
    second_two = await transport.submit([call(3), call(4)], LABEL)
    fake.now = lambda: journaled_at + SUBMIT_WINDOW_S + 60  # after the window
    await transport.submit([call(5), call(6)], LABEL)
    find = functools.partial(transport.find_submitted, LABEL, journaled_at)

    assert await find(2, known=()) == first_two
    assert await find(2, known={first_two}) == second_two
    assert await find(2, known={first_two, second_two}) is None
    assert await find(3, known=()) == three
    assert await find(4, known=()) is None
    # Ended, its requests are counted as answered instead of processing: the same size.
    while (await transport.poll(three)).phase is BatchPhase.OPEN:
        pass
    assert await find(3, known=()) == three


@flavors
async def test_a_batch_label_outside_its_pattern_is_refused_before_any_request(
    flavor: str, fake: FakeBatchServer, factory: JudgeFactory
) -> None:
    transport = transport_for(judge_of(factory, flavor))
    for label in ("", "study 1", "x" * 65):
        with pytest.raises(ValueError, match="batch label"):
            await transport.submit([call(1)], label)
    assert fake.batches == {}
