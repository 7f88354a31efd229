"""Bring your own provider key: a tenant's jobs spend on its own key when an admin set one, on
the server's only if allowed; the key is stored sealed and never returned."""

from __future__ import annotations

import grpc
import pytest
from graded_fakes import answer_by_grade
from keyed import FLAVOR, keyed_server_on, llm_spec

from tierank.v1 import admin_pb2, rank_pb2

TENANT_KEY = "sk-team-a-own-key-0b9e"


def spec() -> rank_pb2.JobSpec:
    return llm_spec(6, batch_size=3)


async def run(session) -> list[rank_pb2.JobEvent]:
    return [
        e
        async for e in session.rank.Rank(
            rank_pb2.RankRequest(spec=spec()), metadata=session.metadata
        )
    ]


def bearer_keys(fake_llm, since: int) -> set[str]:
    return {
        r.headers.get("Authorization", "").removeprefix("Bearer ")
        for r in fake_llm.requests(FLAVOR)[since:]
    }


async def test_a_tenants_jobs_spend_on_its_own_key_and_others_on_the_servers(llm_server, fake_llm):
    answer_by_grade(fake_llm, [FLAVOR])
    admin = llm_server.admin
    alice = llm_server.session(await llm_server.member_key("team-a"))
    bob = llm_server.session(await llm_server.member_key("team-b"))
    tenant = await admin.admin.SetProviderKey(
        admin_pb2.SetProviderKeyRequest(tenant="team-a", provider=FLAVOR, api_key=TENANT_KEY),
        metadata=admin.metadata,
    )
    assert list(tenant.provider_keys) == [FLAVOR]
    assert TENANT_KEY.encode() not in tenant.SerializeToString()

    assert (await run(alice))[-1].HasField("completed")
    assert bearer_keys(fake_llm, 0) == {TENANT_KEY}
    seen = len(fake_llm.requests(FLAVOR))
    assert (await run(bob))[-1].HasField("completed")
    assert bearer_keys(fake_llm, seen) == {"test-key"}  # the server's key, from its config


async def test_a_tenant_barred_from_the_servers_keys_needs_its_own(llm_server, fake_llm):
    answer_by_grade(fake_llm, [FLAVOR])
    admin = llm_server.admin
    await admin.admin.SetTenant(
        admin_pb2.SetTenantRequest(tenant="team-c", allow_server_provider_keys=False),
        metadata=admin.metadata,
    )
    carol = llm_server.session(await llm_server.member_key("team-c"))
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await run(carol)
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "spec.judges[0].provider" in refused.value.details()
    assert not fake_llm.requests(FLAVOR)
    await admin.admin.SetProviderKey(
        admin_pb2.SetProviderKeyRequest(tenant="team-c", provider=FLAVOR, api_key=TENANT_KEY),
        metadata=admin.metadata,
    )
    assert (await run(carol))[-1].HasField("completed")
    assert bearer_keys(fake_llm, 0) == {TENANT_KEY}


async def test_provider_keys_need_the_servers_secret_key(tmp_path, monkeypatch):
    monkeypatch.delenv("TIERANK_SECRET_KEY", raising=False)
    async with keyed_server_on(tmp_path / "t.db") as keyed:
        await keyed.member_key("team-a")
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await keyed.admin.admin.SetProviderKey(
                admin_pb2.SetProviderKeyRequest(tenant="team-a", provider=FLAVOR, api_key="sk-x"),
                metadata=keyed.admin.metadata,
            )
    assert refused.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "TIERANK_SECRET_KEY" in refused.value.details()
