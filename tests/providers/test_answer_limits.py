"""What a provider sends back is bounded, and what it bills never exceeds the reservation
(issue 13, items 35 and 38)."""

from __future__ import annotations

import math
import tracemalloc

from conftest import StartServer
from fakes import (
    FLAVORS,
    MODELS,
    Answer,
    FakeLLMServer,
    HttpError,
    Recorded,
    rank_by_score,
    settings_for,
)
from job_helpers import completed, llm_judge, run_job, verdicts

from tierank.server.errors import MAX_ERROR_TEXT_BYTES
from tierank.server.judges.base import BatchRequest, FailureKind, JudgeConfig, Passage, PoolContext
from tierank.server.judges.bounded_http import MAX_RESPONSE_BYTES
from tierank.server.judges.llm import MAX_ANSWER_CHARS
from tierank.server.judges.registry import JudgeFactory
from tierank.server.judges.settings import BreakerPolicy
from tierank.v1 import rank_pb2

PASSAGES = tuple(Passage(f"d{n}", f"passage {n}") for n in range(1, 4))


async def test_an_answer_beyond_the_text_cap_is_cut_and_marked_not_stored_whole(
    fake_llm: FakeLLMServer,
) -> None:
    factory = JudgeFactory(settings_for(fake_llm))
    pool = PoolContext("q", "r", PASSAGES)
    request = BatchRequest(call_id="c", query="q", rubric="r", passages=PASSAGES)
    # Past the text cap, within the byte cap on what is read from the wire.
    huge = 4 * MAX_ANSWER_CHARS
    assert huge + 1024 < MAX_RESPONSE_BYTES
    for flavor in FLAVORS:
        # A usable ranking at the start survives the cut; pure garbage fails as truncated.
        fake_llm.script(
            flavor, Answer("[3] > [1] > [2] " + "x" * huge), Answer("y" * huge, output_tokens=9)
        )
        judge = factory.build(JudgeConfig(flavor, MODELS[flavor], options={"format": "text"}), pool)
        kept = await judge.judge(request)
        lost = await judge.judge(request)

        assert kept.failure is None and kept.ordering == ("d3", "d1", "d2"), flavor
        assert len(kept.raw_text) < MAX_ANSWER_CHARS + 200
        assert f"answer cut: {huge + 16} characters" in kept.raw_text
        assert lost.failure is not None and lost.failure.kind is FailureKind.TRUNCATED, flavor
        assert f"answer of {huge} characters cut at {MAX_ANSWER_CHARS}" in lost.failure.message
        assert len(lost.raw_text) < MAX_ANSWER_CHARS + 200
        assert lost.usage.output_tokens == 9  # the cut answer was still paid for
        # No corrective follow-up: it would send the garbage back.
        assert len(fake_llm.requests(flavor)) == 2
    await factory.aclose()


async def test_an_answer_beyond_the_byte_cap_fails_as_truncated_without_being_read(
    fake_llm: FakeLLMServer,
) -> None:
    # A breaker that opens at the first failure it hears of: this one must not count.
    factory = JudgeFactory(
        settings_for(fake_llm, breaker=BreakerPolicy(failure_threshold=1, cooldown_s=60.0))
    )
    pool = PoolContext("q", "r", PASSAGES)
    request = BatchRequest(call_id="c", query="q", rubric="r", passages=PASSAGES)
    huge = 8 * 1024 * 1024
    text = "[3] > [1] > [2] " + "x" * huge
    for flavor in FLAVORS:
        fake_llm.script(
            flavor, Answer(text, streamed=True), Answer(text), Answer("[2] > [3] > [1]")
        )
        judge = factory.build(JudgeConfig(flavor, MODELS[flavor], options={"format": "text"}), pool)
        tracemalloc.start()
        try:
            streamed = await judge.judge(request)
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        declared = await judge.judge(request)
        usable = await judge.judge(request)

        for reply in (streamed, declared):
            assert reply.failure is not None and reply.failure.kind is FailureKind.TRUNCATED, flavor
            assert f"cap of {MAX_RESPONSE_BYTES} bytes" in reply.failure.message, flavor
            assert reply.ordering == () and reply.raw_text == ""
        # Refused on its Content-Length, before a byte of the body.
        assert "(Content-Length " in declared.failure.message, flavor
        # Neither the judge nor the SDK held the 8 MiB answer (the fake streams it too).
        assert peak < 4 * 1024 * 1024, (flavor, peak)
        # Not retried (the same answer would come again), and the breaker stayed closed.
        assert usable.failure is None and usable.ordering == ("d2", "d3", "d1"), flavor
        assert len(fake_llm.requests(flavor)) == 3, flavor
    await factory.aclose()


def _openai_usage_for_emoji(request: Recorded) -> Answer:
    """Counts tokens as OpenAI's tokenizer does for this text at worst: 3 per emoji, 1 per
    4 ASCII characters, plus message framing."""
    answer = rank_by_score(request)
    tokens = 0
    for _, text in request.messages:
        ascii_chars = sum(char.isascii() for char in text)
        tokens += 3 * (len(text) - ascii_chars) + math.ceil(ascii_chars / 4) + 4
    return Answer(answer.text, input_tokens=tokens, output_tokens=answer.output_tokens)


async def test_the_input_token_budget_holds_for_emoji_passages(
    fake_llm: FakeLLMServer, judged_server: StartServer
) -> None:
    fake_llm.respond_with("openai", _openai_usage_for_emoji)
    stub = await judged_server()
    n, budget = 40, 25_000
    candidates = [
        rank_pb2.Candidate(id=f"c{i:03d}", text=f"score {n - i} " + "🎉😀🚀🌊" * 60)
        for i in range(n)
    ]
    spec = rank_pb2.JobSpec(
        query="which passage scores highest",
        candidates=candidates,
        judges=[llm_judge("openai")],
        batch_size=10,
        budget=rank_pb2.Budget(max_input_tokens=budget),
    )
    events = await run_job(stub, spec)

    done = completed(events)
    spent = sum(v.usage.input_tokens for v in verdicts(events))
    assert spent == done.stats.input_tokens > 0
    # Each call reports ~7,300 tokens (3 per emoji): a few calls fit, never one too many.
    assert spent <= budget, (spent, budget)
    assert done.reason == rank_pb2.COMPLETION_REASON_BUDGET_EXHAUSTED


async def test_a_huge_provider_error_is_kept_short_in_verdicts_and_stats(
    fake_llm: FakeLLMServer, judged_server: StartServer
) -> None:
    # What a job keeps of an error is bounded, so a job's responses stay within their limit.
    fake_llm.respond_with("openai", lambda request: HttpError(400, message="e" * 200_000))
    stub = await judged_server()
    spec = rank_pb2.JobSpec(
        query="q",
        candidates=[rank_pb2.Candidate(id=f"c{i}", text=f"passage {i}") for i in range(4)],
        judges=[llm_judge("openai")],
        batch_size=4,
    )
    events = await run_job(stub, spec)

    failed = [v for v in verdicts(events) if v.failed]
    assert failed and all("eeee" in v.failure_reason for v in failed)
    assert max(len(v.failure_reason.encode()) for v in failed) <= MAX_ERROR_TEXT_BYTES
    (stats,) = completed(events).stats.judges
    assert 0 < len(stats.last_error.encode()) <= MAX_ERROR_TEXT_BYTES
