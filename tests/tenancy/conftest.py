"""Fixtures for the tenancy tests: a real server with --auth keys on loopback."""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

# Tests run with --import-mode=importlib, so the helper module is put on the path explicitly.
sys.path.insert(0, str(Path(__file__).parent))

from keyed import KeyedServer, keyed_server_on


@pytest.fixture
async def keyed_server(tmp_path: Path) -> AsyncIterator[KeyedServer]:
    async with keyed_server_on(tmp_path / "tierank.db") as server:
        yield server
