"""Each LLM judge, through its real SDK, against a fake server speaking its wire format."""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import replace

import pytest
from fakes import (
    FAST_RETRY,
    FLAVORS,
    JSON_FLAVORS,
    MODELS,
    Answer,
    FakeLLMServer,
    Hang,
    HttpError,
    Recorded,
    settings_for,
)

from tierank.server.judges.base import (
    BatchRequest,
    FailureKind,
    Judge,
    JudgeConfig,
    Passage,
    PoolContext,
)
from tierank.server.judges.prices import TokenCounts, cost_usd
from tierank.server.judges.registry import JudgeFactory

PASSAGES = tuple(
    Passage(id=f"doc-{n}", text=f"Passage body {n}: the {word} fact about tides.")
    for n, word in enumerate(["first", "second", "third", "fourth"], start=1)
)

POOL = PoolContext(query="q", rubric="r", passages=PASSAGES)

MakeJudge = Callable[..., Judge]


def ranking(flavor: str, numbers: list[int]) -> str:
    """An answer in the form the flavor's judge asks for by default."""
    if flavor in JSON_FLAVORS:
        return '{"ranking": [' + ", ".join(map(str, numbers)) + "]}"
    return " > ".join(f"[{n}]" for n in numbers)


def batch(deadline: float | None = None) -> BatchRequest:
    return BatchRequest(
        call_id="call-1",
        query="Why are there two tides a day?",
        rubric="Relevant if it explains the cause of tides.",
        passages=PASSAGES,
        seed=7,
        deadline=deadline,
    )


@pytest.fixture
async def make_judge(fake_llm: FakeLLMServer) -> AsyncIterator[MakeJudge]:
    factory = JudgeFactory(settings_for(fake_llm))
    pool = PoolContext(query=batch().query, rubric=batch().rubric, passages=PASSAGES)

    def make(flavor: str, **config: object) -> Judge:
        return factory.build(JudgeConfig(provider=flavor, model=MODELS[flavor], **config), pool)  # type: ignore[arg-type]

    yield make
    await factory.aclose()


flavors = pytest.mark.parametrize("flavor", FLAVORS)


@flavors
async def test_correct_answer_gives_the_ordering_from_one_request(
    flavor: str, fake_llm: FakeLLMServer, make_judge: MakeJudge
) -> None:
    fake_llm.script(flavor, Answer(ranking(flavor, [3, 1, 4, 2])))
    reply = await make_judge(flavor).judge(batch())

    assert reply.failure is None
    assert reply.ordering == ("doc-3", "doc-1", "doc-4", "doc-2")
    (request,) = fake_llm.requests(flavor)
    assert request.prompt == reply.prompt
    positions = [request.prompt.index(f"[{n}] {p.text}") for n, p in enumerate(PASSAGES, 1)]
    assert positions == sorted(positions)
    assert "Why are there two tides a day?" in request.prompt
    assert "explains the cause of tides" in request.prompt
    assert reply.raw_text == ranking(flavor, [3, 1, 4, 2])


@flavors
async def test_a_ranking_that_leaves_passages_out_is_asked_for_them_once(
    flavor: str, fake_llm: FakeLLMServer, make_judge: MakeJudge
) -> None:
    """Issue 34 item 25: a small model ranked as many passages as the instruction's example
    shows (3), and its partial answers went unchallenged."""
    fake_llm.script(
        flavor,
        Answer(ranking(flavor, [4, 2]), input_tokens=100, output_tokens=5),
        Answer(ranking(flavor, [4, 2, 3, 1]), input_tokens=150, output_tokens=9),
    )
    reply = await make_judge(flavor).judge(batch())

    assert reply.failure is None
    assert reply.ordering == ("doc-4", "doc-2", "doc-3", "doc-1")
    first, follow_up = fake_llm.requests(flavor)
    assert [role for role, _ in follow_up.messages] == ["user", "assistant", "user"]
    assert first.prompt == follow_up.prompt
    asked = follow_up.messages[2][1]
    assert asked.startswith("Your ranking names 2 of the 4 passages; it leaves out [1], [3].")
    assert (reply.usage.input_tokens, reply.usage.output_tokens) == (250, 14)


@flavors
async def test_a_partial_ranking_stands_when_asking_for_the_rest_brings_no_more(
    flavor: str, fake_llm: FakeLLMServer, make_judge: MakeJudge
) -> None:
    judge = make_judge(flavor)
    for second in (Answer(ranking(flavor, [4, 1])), Answer("I cannot rank them."), HttpError(400)):
        fake_llm.script(flavor, Answer(ranking(flavor, [4, 2])), second)
        reply = await judge.judge(batch())
        assert reply.failure is None, second
        assert reply.ordering == ("doc-4", "doc-2"), second


async def test_a_truncated_partial_ranking_is_kept_without_asking_again(
    fake_llm: FakeLLMServer, make_judge: MakeJudge
) -> None:
    # The same output-token limit would cut the follow-up's answer too.
    fake_llm.script("openai-compatible", Answer("[4] > [2] > [", truncated=True))
    reply = await make_judge("openai-compatible").judge(batch())

    assert reply.ordering == ("doc-4", "doc-2")
    assert len(fake_llm.requests("openai-compatible")) == 1


@flavors
async def test_an_index_named_in_two_places_is_asked_again_not_guessed(
    flavor: str, fake_llm: FakeLLMServer, make_judge: MakeJudge
) -> None:
    fake_llm.script(
        flavor, Answer(ranking(flavor, [4, 2, 4, 1])), Answer(ranking(flavor, [4, 2, 1, 3]))
    )
    reply = await make_judge(flavor).judge(batch())

    assert reply.ordering == ("doc-4", "doc-2", "doc-1", "doc-3")
    _, follow_up = fake_llm.requests(flavor)
    assert "names 4 twice" in follow_up.messages[2][1]


@flavors
async def test_prose_around_a_single_ranking_is_tolerated(
    flavor: str, fake_llm: FakeLLMServer, make_judge: MakeJudge
) -> None:
    text = f"Having read all four, my ranking is:\n{ranking(flavor, [2, 3, 1, 4])}\nThanks."
    fake_llm.script(flavor, Answer(text))
    reply = await make_judge(flavor).judge(batch())

    assert reply.ordering == ("doc-2", "doc-3", "doc-1", "doc-4")


@flavors
async def test_unreadable_twice_fails_after_exactly_one_corrective_follow_up(
    flavor: str, fake_llm: FakeLLMServer, make_judge: MakeJudge
) -> None:
    fake_llm.script(
        flavor,
        Answer('{"ranking": [3, 1,', input_tokens=100, output_tokens=5),
        Answer("I cannot decide.", input_tokens=150, output_tokens=4),
    )
    reply = await make_judge(flavor).judge(batch())

    assert reply.failure is not None
    assert reply.failure.kind is FailureKind.UNPARSEABLE
    assert reply.ordering == ()
    first, follow_up = fake_llm.requests(flavor)
    roles = [role for role, _ in follow_up.messages]
    assert roles == ["user", "assistant", "user"]
    assert follow_up.messages[1][1] == '{"ranking": [3, 1,'
    assert "could not be read" in follow_up.messages[2][1]
    assert first.prompt == follow_up.prompt
    # Both answers were paid for, so both count.
    assert (reply.usage.input_tokens, reply.usage.output_tokens) == (250, 9)


@flavors
async def test_corrective_follow_up_can_recover(
    flavor: str, fake_llm: FakeLLMServer, make_judge: MakeJudge
) -> None:
    fake_llm.script(
        flavor,
        Answer("[1] > [2] and also [2] > [1]"),
        Answer(ranking(flavor, [1, 2, 3, 4])),
    )
    reply = await make_judge(flavor).judge(batch())

    assert reply.ordering == ("doc-1", "doc-2", "doc-3", "doc-4")
    assert len(fake_llm.requests(flavor)) == 2


@flavors
async def test_429_is_retried_after_the_delay_retry_after_asks(
    flavor: str, fake_llm: FakeLLMServer, make_judge: MakeJudge
) -> None:
    fake_llm.script(
        flavor,
        HttpError(429, headers={"Retry-After": "0.3"}),
        Answer(ranking(flavor, [1, 2, 3, 4])),
    )
    reply = await make_judge(flavor).judge(batch())

    assert reply.failure is None
    first, second = fake_llm.requests(flavor)
    assert second.at - first.at >= 0.28  # FAST_RETRY's own backoff is at most 0.05 s


@pytest.mark.parametrize("flavor", ["openai", "anthropic"])
async def test_retry_after_ms_takes_precedence(
    flavor: str, fake_llm: FakeLLMServer, make_judge: MakeJudge
) -> None:
    fake_llm.script(
        flavor,
        HttpError(429, headers={"retry-after-ms": "250", "retry-after": "30"}),
        Answer(ranking(flavor, [1, 2, 3, 4])),
    )
    judge = make_judge(flavor)
    started = time.monotonic()
    reply = await judge.judge(batch())

    assert reply.failure is None
    first, second = fake_llm.requests(flavor)
    assert second.at - first.at >= 0.23
    # Far below the 30 s that retry-after asks for.
    assert time.monotonic() - started < 10


async def test_gemini_retry_info_in_the_error_body_is_honoured(
    fake_llm: FakeLLMServer, make_judge: MakeJudge
) -> None:
    retry_info = {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "0.3s"}
    fake_llm.script(
        "gemini", HttpError(429, details=(retry_info,)), Answer(ranking("gemini", [2, 1, 3, 4]))
    )
    reply = await make_judge("gemini").judge(batch())

    assert reply.failure is None
    first, second = fake_llm.requests("gemini")
    assert second.at - first.at >= 0.28


@flavors
async def test_server_errors_are_retried_up_to_the_attempt_limit(
    flavor: str, fake_llm: FakeLLMServer, make_judge: MakeJudge
) -> None:
    fake_llm.script(flavor, HttpError(500), HttpError(503), Answer(ranking(flavor, [4, 3, 2, 1])))
    recovered = await make_judge(flavor).judge(batch())
    assert recovered.ordering == ("doc-4", "doc-3", "doc-2", "doc-1")
    assert len(fake_llm.requests(flavor)) == 3

    fake_llm.script(flavor, HttpError(500), HttpError(500), HttpError(500), Answer("[1] > [2]"))
    failed = await make_judge(flavor).judge(batch())
    assert failed.failure is not None
    assert failed.failure.kind is FailureKind.SERVER_ERROR
    assert len(fake_llm.requests(flavor)) == 6  # FAST_RETRY allows 3 attempts, the SDK none


@flavors
async def test_client_errors_are_not_retried(
    flavor: str, fake_llm: FakeLLMServer, make_judge: MakeJudge
) -> None:
    fake_llm.script(flavor, HttpError(400, message="bad model"), Answer("[1] > [2]"))
    reply = await make_judge(flavor).judge(batch())

    assert reply.failure is not None
    assert reply.failure.kind is FailureKind.CLIENT_ERROR
    assert "bad model" in reply.failure.message
    assert len(fake_llm.requests(flavor)) == 1


@flavors
async def test_a_hang_past_the_timeout_fails_as_timeout_in_bounded_time(
    flavor: str, fake_llm: FakeLLMServer
) -> None:
    fake_llm.script(flavor, Hang(30), Hang(30), Hang(30))
    factory = JudgeFactory(settings_for(fake_llm, timeout_s=0.2))
    judge = factory.build(JudgeConfig(provider=flavor, model=MODELS[flavor]), POOL)
    started = time.monotonic()
    reply = await judge.judge(batch())
    elapsed = time.monotonic() - started
    await factory.aclose()

    assert reply.failure is not None
    assert reply.failure.kind is FailureKind.TIMEOUT
    assert len(fake_llm.requests(flavor)) == 3
    assert elapsed < 3


@flavors
async def test_a_request_never_answered_is_given_up_at_its_time_limit(
    flavor: str, fake_llm: FakeLLMServer
) -> None:
    # Issue 34, item 5: timeouts were retried max_attempts times whatever that added up to.
    # A 1 s timeout and a 1.5 s limit: a first attempt of 1 s, then at most one retry, cut to
    # what is left of the limit (none at all if the first attempt's end came late).
    fake_llm.script(flavor, *[Hang(30)] * 4)
    policy = replace(FAST_RETRY, max_attempts=4, max_elapsed_s=1.5)
    factory = JudgeFactory(settings_for(fake_llm, timeout_s=1.0, retry=policy))
    judge = factory.build(JudgeConfig(provider=flavor, model=MODELS[flavor]), POOL)
    reply = await judge.judge(batch())
    await factory.aclose()

    assert reply.failure is not None
    assert reply.failure.kind is FailureKind.TIMEOUT
    assert 1 <= len(fake_llm.requests(flavor)) <= 2


@flavors
async def test_the_deadline_bounds_the_call_and_its_retries(
    flavor: str, fake_llm: FakeLLMServer
) -> None:
    # The provider's timeout, and the hang, are far beyond the deadline: only the deadline can
    # end the call in well under either, on any machine, however busy.
    timeout_s = 30.0
    fake_llm.script(flavor, Hang(60), Hang(60), Hang(60))
    factory = JudgeFactory(settings_for(fake_llm, timeout_s=timeout_s))
    # Built before the clock starts: the first build imports the provider's SDK (a second
    # or more, cold), which is no part of what the deadline is tested to bound.
    judge = factory.build(JudgeConfig(provider=flavor, model=MODELS[flavor]), POOL)
    started = time.monotonic()
    reply = await judge.judge(batch(deadline=started + 1.0))
    elapsed = time.monotonic() - started
    await factory.aclose()

    assert reply.failure is not None
    assert reply.failure.kind is FailureKind.TIMEOUT
    assert len(fake_llm.requests(flavor)) == 1
    assert 0.9 <= elapsed < timeout_s / 3


@flavors
async def test_retry_after_beyond_the_deadline_is_not_waited_for(
    flavor: str, fake_llm: FakeLLMServer
) -> None:
    # A wait of 60 s (one the policy accepts) against a deadline 20 s away: the judge gives up
    # at once, neither waiting for the retry nor sitting until the deadline; half the deadline
    # tells these apart on any machine, however busy.
    deadline_s = 20.0
    fake_llm.script(flavor, HttpError(429, headers={"Retry-After": "60"}), Answer("[1] > [2]"))
    retry = replace(FAST_RETRY, max_retry_after_s=120)
    factory = JudgeFactory(settings_for(fake_llm, retry=retry))
    # Built before the clock starts (the first build imports the provider's SDK).
    judge = factory.build(JudgeConfig(provider=flavor, model=MODELS[flavor]), POOL)
    started = time.monotonic()
    reply = await judge.judge(batch(deadline=started + deadline_s))
    await factory.aclose()

    assert reply.failure is not None
    assert reply.failure.kind is FailureKind.RATE_LIMITED
    assert len(fake_llm.requests(flavor)) == 1
    assert time.monotonic() - started < deadline_s / 2


@flavors
async def test_truncated_answer_keeps_only_certainly_complete_items(
    flavor: str, fake_llm: FakeLLMServer, make_judge: MakeJudge
) -> None:
    cut = '{"ranking": [3, 1, 2' if flavor in JSON_FLAVORS else "[3] > [1] > [2"
    fake_llm.script(flavor, Answer(cut, truncated=True))
    reply = await make_judge(flavor).judge(batch())

    assert reply.failure is None
    assert reply.ordering == ("doc-3", "doc-1")
    assert len(fake_llm.requests(flavor)) == 1


@flavors
async def test_truncated_answer_without_a_usable_ranking_fails_without_follow_up(
    flavor: str, fake_llm: FakeLLMServer, make_judge: MakeJudge
) -> None:
    fake_llm.script(flavor, Answer("Let me think about passage", truncated=True))
    reply = await make_judge(flavor).judge(batch())

    assert reply.failure is not None
    assert reply.failure.kind is FailureKind.TRUNCATED
    assert len(fake_llm.requests(flavor)) == 1


@flavors
async def test_usage_and_cost_come_from_the_provider_usage_fields(
    flavor: str, fake_llm: FakeLLMServer, make_judge: MakeJudge
) -> None:
    cache_write = 100 if flavor == "anthropic" else 0
    fake_llm.script(
        flavor,
        Answer(
            ranking(flavor, [1, 2, 3, 4]),
            input_tokens=1000,
            output_tokens=50,
            cached_input_tokens=400,
            cache_write_tokens=cache_write,
        ),
    )
    judge = make_judge(flavor)
    reply = await judge.judge(batch())

    assert reply.usage.input_tokens == 1000
    assert reply.usage.cached_input_tokens == 400
    assert reply.usage.output_tokens == 50
    assert reply.usage.latency_s > 0
    price = settings_for(fake_llm).price(flavor, MODELS[flavor])
    if flavor == "openai-compatible":
        assert price is None
        assert reply.usage.cost_usd == 0.0
        return
    assert price is not None
    write_price = price.cache_write if price.cache_write is not None else price.input
    expected = (
        (1000 - 400 - cache_write) * price.input
        + 400 * price.cached_input
        + cache_write * write_price
        + 50 * price.output
    ) / 1e6
    assert reply.usage.cost_usd == pytest.approx(expected)
    assert reply.usage.cost_usd == pytest.approx(
        cost_usd(TokenCounts(1000, 50, 400, cache_write), price)
    )


def max_output_requested(request: Recorded) -> int:
    body = request.body
    if request.flavor == "gemini":
        return body["generationConfig"]["maxOutputTokens"]
    return body.get("max_completion_tokens") or body["max_tokens"]


@flavors
async def test_estimate_is_an_upper_bound_of_a_worst_case_call(
    flavor: str, fake_llm: FakeLLMServer, make_judge: MakeJudge
) -> None:
    def worst_case(request: Recorded) -> Answer:
        # A tokenizer at 3 characters per token, an answer as long as allowed, unreadable.
        sent = sum(len(text) for _, text in request.messages)
        return Answer("no", input_tokens=sent // 3, output_tokens=max_output_requested(request))

    fake_llm.respond_with(flavor, worst_case)
    judge = make_judge(flavor)
    estimate = judge.estimate(batch())
    reply = await judge.judge(batch())

    assert reply.failure is not None
    assert len(fake_llm.requests(flavor)) == 2
    assert estimate.input_tokens >= reply.usage.input_tokens
    assert estimate.output_tokens >= reply.usage.output_tokens
    assert estimate.cost_usd >= reply.usage.cost_usd
    if flavor != "openai-compatible":
        assert estimate.cost_usd > 0


async def test_parameters_reach_the_wire(fake_llm: FakeLLMServer, make_judge: MakeJudge) -> None:
    for flavor in FLAVORS:
        fake_llm.respond_with(flavor, lambda request: Answer('{"ranking": [1, 2, 3, 4]}'))

    await make_judge("openai", temperature=0.0, reasoning=True).judge(batch())
    (openai,) = fake_llm.requests("openai")
    assert openai.body["temperature"] == 0.0
    assert openai.body["reasoning_effort"] == "medium"
    assert openai.body["response_format"]["type"] == "json_schema"
    assert openai.body["seed"] == 7

    await make_judge("openai-compatible", max_output_tokens=77).judge(batch())
    (compatible,) = fake_llm.requests("openai-compatible")
    assert compatible.body["max_tokens"] == 77
    assert "response_format" not in compatible.body

    await make_judge("anthropic", reasoning=True, temperature=0.5, max_output_tokens=100).judge(
        batch()
    )
    (claude,) = fake_llm.requests("anthropic")
    assert claude.body["thinking"] == {"type": "enabled", "budget_tokens": 2048}
    assert claude.body["max_tokens"] == 2148
    assert "temperature" not in claude.body  # thinking accepts only the default

    await make_judge("gemini", reasoning=False, temperature=0.2).judge(batch())
    (gemini,) = fake_llm.requests("gemini")
    generation = gemini.body["generationConfig"]
    assert generation["temperature"] == 0.2
    assert generation["responseMimeType"] == "application/json"
    assert "ranking" in json.dumps(generation["responseJsonSchema"])
    # This SDK release spells the field thinking_budget; the API accepts both spellings.
    assert list(generation["thinkingConfig"].values()) == [0]
    assert "automaticContinuation" not in generation
