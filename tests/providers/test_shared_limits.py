"""State shared across jobs for the server's lifetime: breakers, rate limits, concurrency caps."""

from __future__ import annotations

import asyncio
import itertools
import time

from fakes import Answer, FakeLLMServer, Hang, HttpError, settings_for

from tierank.server.judges.base import BatchRequest, FailureKind, JudgeConfig, Passage, PoolContext
from tierank.server.judges.registry import JudgeFactory
from tierank.server.judges.settings import BreakerPolicy, JudgeSettings, RateLimit

PASSAGES = (Passage("a", "alpha"), Passage("b", "beta"))
POOL = PoolContext("q", "r", PASSAGES)


def batch(call_id: str = "c") -> BatchRequest:
    return BatchRequest(call_id=call_id, query="q", rubric="r", passages=PASSAGES)


async def test_breaker_opens_for_the_failing_model_only(fake_llm: FakeLLMServer) -> None:
    cooldown_s = 60.0
    settings = settings_for(
        fake_llm, breaker=BreakerPolicy(failure_threshold=3, cooldown_s=cooldown_s)
    )
    factory = JudgeFactory(settings)
    openai_judge = factory.build(JudgeConfig("openai", "gpt-4.1"), POOL)
    anthropic_judge = factory.build(JudgeConfig("anthropic", "claude-haiku-4-5"), POOL)
    fake_llm.respond_with(
        "openai",
        lambda request: (
            HttpError(500) if request.body["model"] == "gpt-4.1" else Answer('{"ranking": [2, 1]}')
        ),
    )
    fake_llm.respond_with("anthropic", lambda request: Answer("[2] > [1]"))

    first = await openai_judge.judge(batch())  # 3 attempts, 3 failures: the breaker opens
    assert first.failure is not None and first.failure.kind is FailureKind.SERVER_ERROR
    assert len(fake_llm.requests("openai")) == 3

    # Another job's judge on the same model is refused at once, without a request (not after
    # waiting out the cooldown: a tenth of it tells the two apart on any machine) ...
    blocked_judge = factory.build(JudgeConfig("openai", "gpt-4.1"), POOL)
    started = time.monotonic()
    blocked = await blocked_judge.judge(batch())
    assert blocked.failure is not None and blocked.failure.kind is FailureKind.UNAVAILABLE
    assert "HTTP 500" in blocked.failure.message
    assert time.monotonic() - started < cooldown_s / 10
    assert len(fake_llm.requests("openai")) == 3

    # ... while the provider's other models and other providers still answer.
    other_model = await factory.build(JudgeConfig("openai", "gpt-4.1-mini"), POOL).judge(batch())
    assert other_model.ordering == ("b", "a")
    other = await anthropic_judge.judge(batch())
    assert other.ordering == ("b", "a")
    await factory.aclose()


async def test_request_rate_limit_spaces_requests(fake_llm: FakeLLMServer) -> None:
    base = settings_for(fake_llm)
    # 2 requests per 0.5 s: a burst of 2, then one every 0.25 s.
    limited = JudgeSettings(
        providers=base.providers,
        rate_limits={"openai/gpt-4.1": RateLimit(requests=2, period_s=0.5)},
    )
    factory = JudgeFactory(limited)
    fake_llm.respond_with("openai", lambda request: Answer('{"ranking": [1, 2]}'))
    judge = factory.build(JudgeConfig("openai", "gpt-4.1"), POOL)

    started = time.monotonic()
    calls = asyncio.gather(*(judge.judge(batch(f"c{i}")) for i in range(6)))
    await asyncio.sleep(0.15)
    early = len(fake_llm.requests("openai"))
    replies = await calls

    assert all(reply.failure is None for reply in replies)
    # Only bounds that a busy machine cannot break: it can delay requests, never hasten them.
    assert early <= 3
    arrivals = [request.at - started for request in fake_llm.requests("openai")]
    assert len(arrivals) == 6
    assert max(arrivals) >= 0.8  # 4 requests past the burst at 0.25 s each
    await factory.aclose()


async def test_a_models_rate_limit_holds_back_no_other_model(fake_llm: FakeLLMServer) -> None:
    # One request per period for gpt-4.1: its second call waits a whole period.
    period_s = 60.0
    base = settings_for(fake_llm)
    limited = JudgeSettings(
        providers=base.providers,
        rate_limits={"openai/gpt-4.1": RateLimit(requests=1, period_s=period_s)},
    )
    factory = JudgeFactory(limited)
    fake_llm.respond_with("openai", lambda request: Answer('{"ranking": [1, 2]}'))
    judge = factory.build(JudgeConfig("openai", "gpt-4.1"), POOL)
    await judge.judge(batch("c0"))
    waiting = asyncio.create_task(judge.judge(batch("c1")))
    try:
        other = factory.build(JudgeConfig("openai", "gpt-4.1-mini"), POOL)
        # Held back by gpt-4.1's limiter, these would wait a period: a third of one tells them
        # apart on any machine, without waiting a whole period to fail.
        async with asyncio.timeout(period_s / 3):
            replies = await asyncio.gather(*(other.judge(batch(f"o{i}")) for i in range(4)))

        assert all(reply.failure is None for reply in replies)
        assert not waiting.done()
        models = [request.body["model"] for request in fake_llm.requests("openai")]
        assert models == ["gpt-4.1"] + ["gpt-4.1-mini"] * 4
    finally:
        waiting.cancel()
        await asyncio.gather(waiting, return_exceptions=True)
        await factory.aclose()


async def test_token_rate_limit_holds_back_large_prompts(fake_llm: FakeLLMServer) -> None:
    base = settings_for(fake_llm)
    limited = JudgeSettings(
        providers=base.providers,
        rate_limits={"gemini/gemini-2.5-flash": RateLimit(tokens=400, period_s=0.6)},
    )
    factory = JudgeFactory(limited)
    fake_llm.respond_with("gemini", lambda request: Answer('{"ranking": [1, 2]}'))
    # Each call reserves its prompt (~80 tokens) plus 48 output tokens: 3 fit in the bucket.
    judge = factory.build(JudgeConfig("gemini", "gemini-2.5-flash"), POOL)

    started = time.monotonic()
    replies = await asyncio.gather(*(judge.judge(batch(f"c{i}")) for i in range(6)))

    assert all(reply.failure is None for reply in replies)
    arrivals = sorted(request.at - started for request in fake_llm.requests("gemini"))
    assert len(arrivals) == 6
    assert arrivals[-1] >= 0.5
    await factory.aclose()


async def test_concurrency_cap_per_provider(fake_llm: FakeLLMServer) -> None:
    factory = JudgeFactory(settings_for(fake_llm, max_concurrency=1))
    fake_llm.respond_with("anthropic", lambda request: Hang(0.2, then=Answer("[1] > [2]")))
    judge = factory.build(JudgeConfig("anthropic", "claude-haiku-4-5"), POOL)

    replies = await asyncio.gather(*(judge.judge(batch(f"c{i}")) for i in range(3)))

    assert all(reply.failure is None for reply in replies)
    arrivals = [request.at for request in fake_llm.requests("anthropic")]
    gaps = [later - earlier for earlier, later in itertools.pairwise(arrivals)]
    assert all(gap >= 0.18 for gap in gaps)
    await factory.aclose()
