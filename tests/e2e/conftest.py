"""Fixtures for end-to-end runs: a real server whose LLM judges talk, through their real SDKs,
to fake provider servers on loopback."""

from __future__ import annotations

import json
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import pytest

# Tests run with --import-mode=importlib, so the helper module is put on the path explicitly.
sys.path.insert(0, str(Path(__file__).parent))

from graded_fakes import (
    FAKE_MODEL_PRICES,
    PROVIDER_ENV,
    FakeLLMServer,
    FakeLLMThread,
    judges_config,
)

from tierank.server.app import background_server
from tierank.server.settings import ServerSettings


@pytest.fixture(autouse=True)
def _no_provider_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """Only the config file a test writes may configure providers (no real keys, no real URLs)."""
    for name in PROVIDER_ENV:
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def fake_llm() -> Iterator[FakeLLMServer]:
    with FakeLLMThread() as server:
        yield server


WriteConfig = Callable[..., Path]


@pytest.fixture
def write_judges_config(fake_llm: FakeLLMServer, tmp_path: Path) -> WriteConfig:
    """Writes a judges config file pointing every provider at the fake; returns its path."""

    def write(**overrides: Any) -> Path:
        path = tmp_path / "judges.json"
        path.write_text(json.dumps(judges_config(fake_llm, prices=FAKE_MODEL_PRICES, **overrides)))
        return path

    return write


StartServer = Callable[[Path], Awaitable[str]]


@pytest.fixture
async def start_server(tmp_path: Path) -> AsyncIterator[StartServer]:
    """Starts in-process servers sharing one SQLite file; each is stopped before the next
    starts, so a second call is a restart."""
    running = AsyncExitStack()

    async def start(judges_config_path: Path) -> str:
        await running.aclose()
        settings = ServerSettings(
            listen="127.0.0.1:0",
            db=tmp_path / "tierank.db",
            judges_config=judges_config_path,
            shutdown_grace_s=2.0,
            max_message_mb=4,
        )
        return await running.enter_async_context(background_server(settings))

    yield start
    await running.aclose()
