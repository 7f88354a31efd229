"""Fixtures for end-to-end runs: a real server whose LLM judges talk, through their real SDKs,
to fake provider servers on loopback."""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
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

from tierank.server.app import serve
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
    running: list[tuple[anyio.Event, asyncio.Task[None]]] = []

    async def stop_running() -> None:
        while running:
            stop, task = running.pop()
            stop.set()
            await asyncio.wait_for(task, 30)

    async def start(judges_config_path: Path) -> str:
        await stop_running()
        ready = tmp_path / f"ready-{len(list(tmp_path.glob('ready-*')))}"
        settings = ServerSettings(
            listen="127.0.0.1:0",
            db=tmp_path / "tierank.db",
            judges_config=judges_config_path,
            ready_file=ready,
            shutdown_grace_s=2.0,
            max_message_mb=4,
        )
        stop = anyio.Event()
        task = asyncio.create_task(serve(settings, stop))
        running.append((stop, task))
        while not (ready.exists() and ready.read_text()):
            if task.done():
                task.result()
            await asyncio.sleep(0.01)
        return ready.read_text()

    yield start
    await stop_running()
