"""Fixtures for the EvalService tests: an eval stub, jobs run to completion, files as messages."""

from __future__ import annotations

import json
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest

from tierank.server.app import background_server
from tierank.server.settings import ServerSettings
from tierank.v1 import eval_pb2_grpc, rank_pb2, rank_pb2_grpc

# Tests run with --import-mode=importlib: put this folder (support module) and the provider
# fakes on the path explicitly.
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "providers"))

from fakes import FakeLLMServer


@pytest.fixture
async def eval_stub(server_address: str) -> AsyncIterator[eval_pb2_grpc.EvalServiceStub]:
    async with grpc.aio.insecure_channel(server_address) as channel:
        yield eval_pb2_grpc.EvalServiceStub(channel)


@pytest.fixture
def run_job(stub: rank_pb2_grpc.RankServiceStub):
    """Run a job to its end through RankService and return it with its final tiers."""

    async def run(spec: rank_pb2.JobSpec) -> rank_pb2.Job:
        name = ""
        async for event in stub.Rank(rank_pb2.RankRequest(spec=spec)):
            name = event.job
        return await stub.GetJob(rank_pb2.GetJobRequest(name=name))

    return run


@pytest.fixture
async def fake_llm() -> AsyncIterator[FakeLLMServer]:
    async with FakeLLMServer() as server:
        yield server


@pytest.fixture
async def llm_server_address(tmp_path: Path, fake_llm: FakeLLMServer) -> AsyncIterator[str]:
    """An in-process server whose LLM providers all point at the fake LLM server."""
    fast = {
        "api_key": "test-key",
        "timeout_s": 5.0,
        "retry": {"max_attempts": 2, "base_delay_s": 0.01, "max_delay_s": 0.05},
    }
    config = {
        "providers": {
            flavor: {**fast, "base_url": fake_llm.base_url(flavor)}
            for flavor in ("openai", "anthropic", "gemini", "openai-compatible")
        }
    }
    config_path = tmp_path / "judges.json"
    config_path.write_text(json.dumps(config))
    settings = ServerSettings(
        listen="127.0.0.1:0",
        db=tmp_path / "llm.db",
        judges_config=config_path,
        shutdown_grace_s=1.0,
    )
    async with background_server(settings) as address:
        yield address
