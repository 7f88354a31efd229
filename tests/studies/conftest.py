"""The StudyService of an in-process server (tests/conftest.py's server_address)."""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest

# Tests run with --import-mode=importlib, so the helper module (study_data) is put on the path.
sys.path.insert(0, str(Path(__file__).parent))

from tierank.v1 import study_pb2_grpc


@pytest.fixture
async def studies(server_address: str) -> AsyncIterator[study_pb2_grpc.StudyServiceStub]:
    async with grpc.aio.insecure_channel(server_address) as channel:
        yield study_pb2_grpc.StudyServiceStub(channel)
