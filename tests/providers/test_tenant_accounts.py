"""Judges on a tenant's own provider key ("bring your own key"), through the real SDKs against
the fake provider server: the key each judge sends, and isolation of breakers, rate limits and
clients between tenants and the server's own key."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from dataclasses import replace
from typing import Any

import pytest
import structlog
from fakes import (
    FLAVORS,
    JSON_FLAVORS,
    MODELS,
    Answer,
    FakeLLMServer,
    HttpError,
    Recorded,
    settings_for,
)

from tierank.server.judges.accounts import ProviderAccount
from tierank.server.judges.base import (
    BatchRequest,
    FailureKind,
    Judge,
    JudgeConfig,
    JudgeConfigError,
    Passage,
    PoolContext,
)
from tierank.server.judges.graders import GradeRequest
from tierank.server.judges.registry import JudgeFactory
from tierank.server.judges.settings import BreakerPolicy, JudgeSettings, RateLimit

SERVER_KEY = "test-key"  # what settings_for gives every provider
KEY_A = "sk-tenant-a"
KEY_B = "sk-tenant-b"
TENANT_A = ProviderAccount(tenant="a", api_key=KEY_A)
TENANT_B = ProviderAccount(tenant="b", api_key=KEY_B)
PASSAGES = (Passage("p1", "alpha"), Passage("p2", "beta"))
POOL = PoolContext("q", "r", PASSAGES)

flavors = pytest.mark.parametrize("flavor", FLAVORS)


def batch(call_id: str = "c") -> BatchRequest:
    return BatchRequest(call_id=call_id, query="q", rubric="r", passages=PASSAGES)


def config(flavor: str) -> JudgeConfig:
    return JudgeConfig(flavor, MODELS[flavor])


def answer(flavor: str, request: Recorded | None = None) -> Answer:
    """Passage 2 first (or grade 2 to a pointwise prompt), in the form the flavor's judge asks
    for by default."""
    json_form = flavor in JSON_FLAVORS
    if request is not None and "0 = the passage has nothing" in request.prompt:
        return Answer('{"grade": 2}' if json_form else "##final score: 2")
    return Answer('{"ranking": [2, 1]}' if json_form else "[2] > [1]")


def key_sent(request: Recorded) -> str:
    """The provider key a request carried, in the header its SDK puts it in."""
    headers = {name.lower(): value for name, value in request.headers.items()}
    if "authorization" in headers:
        return headers["authorization"].removeprefix("Bearer ")
    return headers.get("x-api-key") or headers["x-goog-api-key"]


def keys_sent(fake: FakeLLMServer, flavor: str) -> list[str]:
    return [key_sent(request) for request in fake.requests(flavor)]


@pytest.fixture
async def factory(fake_llm: FakeLLMServer) -> AsyncIterator[JudgeFactory]:
    factory = JudgeFactory(
        settings_for(fake_llm, breaker=BreakerPolicy(failure_threshold=3, cooldown_s=60))
    )
    yield factory
    await factory.aclose()


@flavors
async def test_a_judge_with_an_account_sends_the_tenants_key(
    flavor: str, fake_llm: FakeLLMServer, factory: JudgeFactory
) -> None:
    fake_llm.respond_with(flavor, lambda request: answer(flavor, request))

    tenant = await factory.build(config(flavor), POOL, TENANT_A).judge(batch())
    server = await factory.build(config(flavor), POOL).judge(batch())
    grader = factory.build_grader(config(flavor), TENANT_B)
    graded = await grader.grade(GradeRequest("q", "r", PASSAGES[0]))

    assert tenant.failure is None and tenant.ordering == ("p2", "p1")
    assert server.failure is None and server.ordering == ("p2", "p1")
    assert graded.failure is None and graded.grade == 2
    assert keys_sent(fake_llm, flavor) == [KEY_A, SERVER_KEY, KEY_B]


@flavors
async def test_a_tenants_failures_open_only_its_own_breaker(
    flavor: str, fake_llm: FakeLLMServer, factory: JudgeFactory
) -> None:
    failing = {KEY_A}
    fake_llm.respond_with(
        flavor,
        lambda request: HttpError(500) if key_sent(request) in failing else answer(flavor),
    )
    tenant_a = factory.build(config(flavor), POOL, TENANT_A)

    first = await tenant_a.judge(batch())  # 3 attempts, 3 failures: a's breaker opens
    assert first.failure is not None and first.failure.kind is FailureKind.SERVER_ERROR
    assert keys_sent(fake_llm, flavor) == [KEY_A] * 3
    refused = await factory.build(config(flavor), POOL, TENANT_A).judge(batch())
    assert refused.failure is not None and refused.failure.kind is FailureKind.UNAVAILABLE
    assert len(fake_llm.requests(flavor)) == 3  # refused without a request

    # Tenant b and the server's key, on the same provider and model, still get answers ...
    other_tenant = await factory.build(config(flavor), POOL, TENANT_B).judge(batch())
    server = await factory.build(config(flavor), POOL).judge(batch())
    assert other_tenant.ordering == server.ordering == ("p2", "p1")

    # ... and the server's key failing in turn opens no tenant's breaker.
    failing.add(SERVER_KEY)
    await factory.build(config(flavor), POOL).judge(batch())
    server_refused = await factory.build(config(flavor), POOL).judge(batch())
    assert server_refused.failure is not None
    assert server_refused.failure.kind is FailureKind.UNAVAILABLE
    still = await factory.build(config(flavor), POOL, TENANT_B).judge(batch())
    assert still.failure is None and still.ordering == ("p2", "p1")


async def test_a_tenants_rate_limit_holds_back_only_its_own_calls(
    fake_llm: FakeLLMServer,
) -> None:
    # One request per period for the model: the second call on one key waits a whole period.
    period_s = 60.0
    base = settings_for(fake_llm)
    factory = JudgeFactory(
        JudgeSettings(
            providers=base.providers,
            rate_limits={"openai/gpt-4.1-mini": RateLimit(requests=1, period_s=period_s)},
        )
    )
    fake_llm.respond_with("openai", lambda request: answer("openai"))
    await factory.build(config("openai"), POOL, TENANT_A).judge(batch("a1"))
    waiting = asyncio.create_task(factory.build(config("openai"), POOL, TENANT_A).judge(batch()))
    try:
        # Held back by a's limiter, these would wait most of a period: a third of one tells
        # them apart on any machine, however busy, without waiting a whole period to fail.
        async with asyncio.timeout(period_s / 3):
            other_tenant = await factory.build(config("openai"), POOL, TENANT_B).judge(batch("b1"))
            server = await factory.build(config("openai"), POOL).judge(batch("s1"))

        assert other_tenant.failure is None and server.failure is None
        assert not waiting.done()
        assert keys_sent(fake_llm, "openai") == [KEY_A, KEY_B, SERVER_KEY]
    finally:
        waiting.cancel()
        await asyncio.gather(waiting, return_exceptions=True)
        await factory.aclose()


def _is_closed(judge: Judge) -> bool:
    client: Any = judge.client  # type: ignore[attr-defined]
    http = getattr(client, "http", None)  # the Gemini adapter holds its own httpx client
    return bool(http.is_closed) if http is not None else bool(client.is_closed())


async def test_clients_are_made_once_per_provider_and_tenant_and_closed_by_aclose(
    fake_llm: FakeLLMServer,
) -> None:
    factory = JudgeFactory(settings_for(fake_llm))
    judges: list[Judge] = []
    for flavor in FLAVORS:
        server = factory.build(config(flavor), POOL)
        a, a_again = (factory.build(config(flavor), POOL, TENANT_A) for _ in range(2))
        b = factory.build(config(flavor), POOL, TENANT_B)
        a_grader = factory.build_grader(config(flavor), TENANT_A)
        clients: Any = [j.client for j in (server, a, a_again, b)]  # type: ignore[attr-defined]
        assert clients[1] is clients[2]
        assert a.shared is a_again.shared and a.shared.tenant == "a"  # type: ignore[attr-defined]
        assert len({id(client) for client in clients}) == 3
        assert a_grader._judge.client is clients[1]  # type: ignore[attr-defined]
        judges += [server, a, b]
    # An admin's new key for tenant a gets a new client; a job already running keeps the old.
    rotated = factory.build(config("openai"), POOL, replace(TENANT_A, api_key="sk-tenant-a-2"))
    assert rotated.client is not judges[1].client  # type: ignore[attr-defined]
    assert rotated.shared is judges[1].shared  # type: ignore[attr-defined]
    judges.append(rotated)
    assert not any(_is_closed(judge) for judge in judges)

    await factory.aclose()

    assert all(_is_closed(judge) for judge in judges)


async def test_the_key_is_in_no_repr_nor_failure_nor_log(
    fake_llm: FakeLLMServer, factory: JudgeFactory, caplog: pytest.LogCaptureFixture
) -> None:
    assert KEY_A not in repr(TENANT_A) and KEY_A not in str(TENANT_A)
    assert "tenant='a'" in repr(TENANT_A)
    # Providers echo (part of) a bad key in their error text; these fakes echo all of it.
    fake_llm.respond_with(
        "openai", lambda request: HttpError(401, message=f"Incorrect key: {key_sent(request)}")
    )
    fake_llm.respond_with(
        "anthropic",
        lambda request: HttpError(500, message=f"overloaded for key {key_sent(request)}"),
    )
    caplog.set_level(logging.DEBUG)
    with structlog.testing.capture_logs() as logs:
        replies = [
            await factory.build(config("openai"), POOL, TENANT_A).judge(batch()),
            await factory.build(config("openai"), POOL).judge(batch()),
            # Three 500s open a's breaker; the refusal quotes the last failure.
            await factory.build(config("anthropic"), POOL, TENANT_A).judge(batch()),
            await factory.build(config("anthropic"), POOL, TENANT_A).judge(batch()),
        ]
    kinds = [reply.failure.kind for reply in replies if reply.failure]
    assert kinds == [
        FailureKind.CLIENT_ERROR,
        FailureKind.CLIENT_ERROR,
        FailureKind.SERVER_ERROR,
        FailureKind.UNAVAILABLE,
    ]
    assert keys_sent(fake_llm, "openai") == [KEY_A, SERVER_KEY]
    texts = [f"{reply.failure} {reply.raw_text} {reply.prompt}" for reply in replies]
    texts += [caplog.text, repr(logs)]
    assert "Incorrect key: [redacted]" in texts[0] and "[redacted]" in texts[3]
    for secret in (KEY_A, SERVER_KEY):
        assert not [text for text in texts if secret in text]


async def test_an_account_needs_no_server_key_and_offline_judges_ignore_it(
    fake_llm: FakeLLMServer,
) -> None:
    keyless = settings_for(fake_llm, api_key=None)
    factory = JudgeFactory(keyless)
    fake_llm.respond_with("anthropic", lambda request: answer("anthropic"))

    with pytest.raises(JudgeConfigError, match="need ANTHROPIC_API_KEY in the server's settings"):
        factory.build(config("anthropic"), POOL)
    with pytest.raises(JudgeConfigError, match="need OPENAI_API_KEY"):
        factory.build_grader(config("openai"))
    reply = await factory.build(config("anthropic"), POOL, TENANT_A).judge(batch())
    assert reply.failure is None and keys_sent(fake_llm, "anthropic") == [KEY_A]

    lexical = factory.build(JudgeConfig("lexical"), POOL, TENANT_A)
    assert (await lexical.judge(batch())).failure is None
    oracle = factory.build_grader(JudgeConfig("oracle"), TENANT_A)
    scored = Passage("p1", "alpha", {"score": "2"})
    assert (await oracle.grade(GradeRequest("q", "r", scored))).grade is not None
    with pytest.raises(ValueError, match="empty key") as empty:
        ProviderAccount(tenant="a", api_key="")
    assert "tenant 'a'" in str(empty.value)
    await factory.aclose()
