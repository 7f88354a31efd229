"""A real server with --auth keys on loopback, its first operator key made as an operator makes
it (`python -m tierank.server.admin_tool`'s call on the database before the server starts), and
sessions to call it as one tenant or another."""

from __future__ import annotations

import json
import sys
from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import anyio
import grpc

from tierank.server.admin_tool import call
from tierank.server.app import background_server
from tierank.server.settings import ServerSettings
from tierank.v1 import admin_pb2, admin_pb2_grpc, eval_pb2_grpc, rank_pb2_grpc


def admin_tool(db: Path | str, method: str, request: dict) -> dict:
    """One AdminService call on the database, as `tierank keys --db` makes it: the admin tool's
    own call, made in this process (tests/client/test_cli_admin.py runs the tool as a process)
    and on a thread of its own, since the tests that set up call it from their event loop."""
    settings = ServerSettings(db=db)
    with ThreadPoolExecutor(1) as thread:
        made = thread.submit(anyio.run, call, method, settings, json.dumps(request))
        return json.loads(made.result(timeout=60))


def operator_key(db: Path | str) -> str:
    """The first operator key, made as `tierank tenants set` and `keys create --db` make it."""
    admin_tool(db, "SetTenant", {"tenant": "ops"})
    return admin_tool(db, "CreateApiKey", {"tenant": "ops", "role": "ROLE_OPERATOR"})["secret"]


@dataclass
class Session:
    """Stubs whose every call carries one bearer token (or none)."""

    channel: grpc.aio.Channel
    token: str | None

    @property
    def metadata(self) -> tuple[tuple[str, str], ...]:
        return (("authorization", f"Bearer {self.token}"),) if self.token else ()

    @property
    def rank(self) -> rank_pb2_grpc.RankServiceStub:
        return rank_pb2_grpc.RankServiceStub(self.channel)

    @property
    def eval(self) -> eval_pb2_grpc.EvalServiceStub:
        return eval_pb2_grpc.EvalServiceStub(self.channel)

    @property
    def admin(self) -> admin_pb2_grpc.AdminServiceStub:
        return admin_pb2_grpc.AdminServiceStub(self.channel)


@dataclass
class KeyedServer:
    address: str
    db: Path
    channel: grpc.aio.Channel
    admin_token: str

    def session(self, token: str | None) -> Session:
        return Session(self.channel, token)

    @property
    def admin(self) -> Session:
        return self.session(self.admin_token)

    async def member_key(self, tenant: str, **quota: float) -> str:
        return await self.key(tenant, admin_pb2.ROLE_MEMBER, **quota)

    async def key(self, tenant: str, role: admin_pb2.Role.ValueType, **quota: float) -> str:
        """A key of `tenant` (created, with these limits, by the operator) in this role."""
        await self.admin.admin.SetTenant(
            admin_pb2.SetTenantRequest(tenant=tenant, quota=admin_pb2.Quota(**quota)),
            metadata=self.admin.metadata,
        )
        made = await self.admin.admin.CreateApiKey(
            admin_pb2.CreateApiKeyRequest(tenant=tenant, role=role),
            metadata=self.admin.metadata,
        )
        return made.secret


@asynccontextmanager
async def keyed_server_on(db: Path, **settings: object) -> AsyncIterator[KeyedServer]:
    """Make the first operator key on `db`, then serve it with --auth keys."""
    first = operator_key(db)
    server_settings = ServerSettings(
        listen="127.0.0.1:0", db=db, shutdown_grace_s=1.0, auth="keys", **settings
    )
    async with (
        background_server(server_settings) as address,
        grpc.aio.insecure_channel(address) as channel,
    ):
        yield KeyedServer(address, db, channel, first)


# LLM judges in these tests talk to the e2e fake provider (tests/e2e/graded_fakes.py).
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "e2e"))

from graded_fakes import (  # noqa: E402
    FAKE_MODEL_PRICES,
    MODELS,
    FakeLLMServer,
    graded_pool,
    judges_config,
)

from tierank.client import candidate, job_spec, judge  # noqa: E402
from tierank.v1 import rank_pb2  # noqa: E402

FLAVOR = "openai"


def write_llm_config(tmp_path: Path, fake: FakeLLMServer, server_key: str | None = None) -> Path:
    """A judges config pointing every provider at the fake (the server's key: `server_key`,
    or the fake config's own)."""
    config = judges_config(fake, prices=FAKE_MODEL_PRICES)
    if server_key is not None:
        config["providers"][FLAVOR]["api_key"] = server_key
    path = tmp_path / "judges.json"
    path.write_text(json.dumps(config))
    return path


def llm_spec(n: int, seed: int = 0, batch_size: int = 4) -> rank_pb2.JobSpec:
    """A job of graded passages for one LLM judge on the fake provider."""
    return job_spec(
        "which passage has the highest grade",
        [candidate(c.id, c.text) for c in graded_pool(n, seed=seed)],
        judges=[judge(f"{FLAVOR}:{MODELS[FLAVOR]}")],
        rubric="a passage is better the higher its grade",
        batch_size=batch_size,
    )
