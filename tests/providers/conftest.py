"""Fixtures for the provider tests: a fake LLM server on loopback, and a real tierank server
whose LLM judges talk to it."""

from __future__ import annotations

import json
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import grpc
import pytest

# Tests run with --import-mode=importlib, so the fakes module is put on the path explicitly.
sys.path.insert(0, str(Path(__file__).parent))

from fakes import FakeLLMServer, provider_settings

from tierank.server.app import background_server
from tierank.server.judges.providers import PROVIDERS
from tierank.server.judges.settings import CONFIG_PATH_ENV
from tierank.server.settings import ServerSettings
from tierank.v1 import rank_pb2_grpc

# Every variable the judges' settings read: only the config file a test writes may count.
_PROVIDER_ENV = (
    CONFIG_PATH_ENV,
    "OPENAI_API_KEY",
    "ANTHROPIC_API_KEY",
    "GEMINI_API_KEY",
    "GOOGLE_API_KEY",
    *(
        f"TIERANK_{p.upper().replace('-', '_')}_{suffix}"
        for p in PROVIDERS
        for suffix in ("API_KEY", "BASE_URL")
    ),
)


@pytest.fixture
async def fake_llm() -> AsyncIterator[FakeLLMServer]:
    async with FakeLLMServer() as server:
        yield server


StartServer = Callable[..., Awaitable[rank_pb2_grpc.RankServiceStub]]
StartAddress = Callable[..., Awaitable[str]]


@pytest.fixture
async def judged_address(
    fake_llm: FakeLLMServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[StartAddress]:
    """Starts an in-process tierank server whose providers all point at `fake_llm` (fast
    retries, a breaker that opens after 100 failures), each provider's settings overridable:
    `await judged_address(**{"openai-compatible": {"timeout_s": 2}})`. Returns its address."""
    for name in _PROVIDER_ENV:
        monkeypatch.delenv(name, raising=False)
    async with AsyncExitStack() as running:

        async def start(**overrides: Mapping[str, Any]) -> str:
            providers = provider_settings(fake_llm, **overrides)
            config = tmp_path / "judges.json"
            config.write_text(json.dumps({"providers": providers}), encoding="utf-8")
            settings = ServerSettings(
                listen="127.0.0.1:0",
                db=tmp_path / "tierank.db",
                judges_config=config,
                shutdown_grace_s=2.0,
                max_message_mb=4,
            )
            return await running.enter_async_context(background_server(settings))

        yield start


@pytest.fixture
async def judged_server(judged_address: StartAddress) -> AsyncIterator[StartServer]:
    """As `judged_address`, returning a stub of the server."""
    async with AsyncExitStack() as channels:

        async def start(**overrides: Mapping[str, Any]) -> rank_pb2_grpc.RankServiceStub:
            address = await judged_address(**overrides)
            channel = await channels.enter_async_context(grpc.aio.insecure_channel(address))
            return rank_pb2_grpc.RankServiceStub(channel)

        yield start
