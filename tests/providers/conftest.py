"""Fixtures for the provider tests: a fake LLM server on loopback."""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

# Tests run with --import-mode=importlib, so the fakes module is put on the path explicitly.
sys.path.insert(0, str(Path(__file__).parent))

from fakes import FakeLLMServer


@pytest.fixture
async def fake_llm() -> AsyncIterator[FakeLLMServer]:
    async with FakeLLMServer() as server:
        yield server
