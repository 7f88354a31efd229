"""Fixtures for the tenancy tests: a real server with --auth keys on loopback, and one whose
LLM judges talk to the e2e fake provider."""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

# Tests run with --import-mode=importlib, so the helper modules (keyed here, graded_fakes of the
# e2e tests) are put on the path explicitly.
sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parent.parent / "e2e"))

from cryptography.fernet import Fernet
from graded_fakes import FakeLLMServer, FakeLLMThread
from keyed import KeyedServer, keyed_server_on, write_llm_config

# Only the config file a test writes may configure providers (no real keys, no real URLs).
_PROVIDER_ENV = ("OPENAI_API_KEY", "TIERANK_OPENAI_BASE_URL")


@pytest.fixture
async def keyed_server(tmp_path: Path) -> AsyncIterator[KeyedServer]:
    async with keyed_server_on(tmp_path / "tierank.db") as server:
        yield server


@pytest.fixture
def fake_llm(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeLLMServer]:
    for name in _PROVIDER_ENV:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("TIERANK_SECRET_KEY", Fernet.generate_key().decode())
    with FakeLLMThread() as server:
        yield server


@pytest.fixture
async def llm_server(tmp_path: Path, fake_llm: FakeLLMServer) -> AsyncIterator[KeyedServer]:
    """A keyed server whose LLM judges talk to the fake provider; tenants may set their own
    provider keys (TIERANK_SECRET_KEY is set)."""
    config = write_llm_config(tmp_path, fake_llm)
    async with keyed_server_on(tmp_path / "t.db", judges_config=config) as server:
        yield server
