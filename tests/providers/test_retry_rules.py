"""Retry-After reading, backoff, the breaker and the prompt's token rules, without a server."""

from __future__ import annotations

import email.utils
import random

from tierank.server.judges.base import FailureKind, Passage
from tierank.server.judges.breaker import CircuitBreaker
from tierank.server.judges.prompt import (
    TEMPLATE_VERSION,
    AnswerFormat,
    cut_to_budget,
    estimate_tokens,
    render_prompt,
)
from tierank.server.judges.retry import backoff_delay, classify_status, retry_after_seconds
from tierank.server.judges.settings import BreakerPolicy, RetryPolicy


def test_retry_after_forms() -> None:
    assert retry_after_seconds({"Retry-After": "7"}) == 7.0
    assert retry_after_seconds({"retry-after": "1.5"}) == 1.5
    assert retry_after_seconds({"retry-after-ms": "250", "retry-after": "9"}) == 0.25
    assert retry_after_seconds({"retry-after": "soon"}) is None
    assert retry_after_seconds({}) is None
    assert retry_after_seconds(None) is None


def test_an_unreadable_retry_after_ms_leaves_retry_after_to_say() -> None:
    assert retry_after_seconds({"retry-after-ms": "soon", "retry-after": "9"}) == 9.0
    assert retry_after_seconds({"retry-after-ms": "soon"}) is None


def test_retry_after_as_http_date() -> None:
    now = 1_700_000_000.0
    header = email.utils.formatdate(now + 30, usegmt=True)
    assert retry_after_seconds({"Retry-After": header}, now=now) == 30.0
    past = email.utils.formatdate(now - 30, usegmt=True)
    assert retry_after_seconds({"Retry-After": past}, now=now) == 0.0


def test_backoff_grows_is_capped_and_jittered() -> None:
    policy = RetryPolicy(base_delay_s=1.0, max_delay_s=8.0)
    rng = random.Random(1)
    for attempt, ceiling in [(1, 1.0), (2, 2.0), (3, 4.0), (4, 8.0), (9, 8.0)]:
        delays = {backoff_delay(attempt, policy, rng) for _ in range(20)}
        assert all(ceiling / 2 <= d <= ceiling for d in delays)
        assert len(delays) > 1


def test_status_classification() -> None:
    assert classify_status(429, {"retry-after": "2"}, "slow").kind is FailureKind.RATE_LIMITED
    assert classify_status(429, {"retry-after": "2"}, "slow").retry_after_s == 2.0
    assert classify_status(529, None, "overloaded").kind is FailureKind.SERVER_ERROR
    assert classify_status(408, None, "").kind is FailureKind.TIMEOUT
    assert classify_status(401, None, "bad key").kind is FailureKind.CLIENT_ERROR


def test_breaker_opens_after_threshold_and_half_opens_after_cooldown() -> None:
    now = [0.0]
    breaker = CircuitBreaker(
        BreakerPolicy(failure_threshold=3, cooldown_s=10), clock=lambda: now[0]
    )
    breaker.record_failure()
    breaker.record_failure()
    assert not breaker.is_open
    breaker.record_failure()
    assert breaker.is_open
    now[0] = 10.5
    assert not breaker.is_open  # half-open: calls go through
    breaker.record_failure()  # one failure while half-open opens it again
    assert breaker.is_open
    now[0] = 21.0
    breaker.record_success()
    breaker.record_failure()
    assert not breaker.is_open


def test_passages_are_cut_to_the_token_budget_at_a_word_boundary() -> None:
    text = " ".join(f"word{i}" for i in range(1000))
    cut = cut_to_budget(text, token_budget=50)
    assert cut.endswith(" …")
    assert estimate_tokens(cut.removesuffix(" …")) <= 50
    assert text.startswith(cut.removesuffix(" …"))
    assert cut_to_budget("short\n\npassage", 50) == "short passage"


def test_prompt_numbers_passages_in_presentation_order() -> None:
    passages = (Passage("b", "beta text"), Passage("a", "alpha text"))
    prompt = render_prompt("q?", "rubric here", passages, AnswerFormat.TEXT)
    assert prompt.index("[1] beta text") < prompt.index("[2] alpha text")
    assert "q?" in prompt and "rubric here" in prompt
    assert '"ranking"' in render_prompt("q", "r", passages, AnswerFormat.JSON)
    assert TEMPLATE_VERSION
