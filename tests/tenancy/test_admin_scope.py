"""A tenant's admin manages its own tenant only: every AdminService RPC aimed at another tenant
answers exactly as for a tenant (or key) that does not exist, and changes nothing. The operator
acts on every tenant, and alone creates tenants and makes operator keys."""

from __future__ import annotations

import grpc
import pytest
from test_isolation import status_of

from tierank.v1 import admin_pb2, rank_pb2

# As long as "team-b", so that the two statuses serialize to the same bytes but for the name.
MISSING = "team-x"


async def refused(call) -> grpc.aio.AioRpcError:
    with pytest.raises(grpc.aio.AioRpcError) as error:
        await call()
    return error.value


def same_answer(error: grpc.aio.AioRpcError, missing: grpc.aio.AioRpcError, real: str) -> None:
    """`error` (about `real`) reads exactly like `missing` (about MISSING or a missing key)."""
    assert error.code() == grpc.StatusCode.NOT_FOUND
    assert missing.code() == grpc.StatusCode.NOT_FOUND
    ours, theirs = status_of(error), status_of(missing)
    assert ours.SerializeToString().replace(real.encode(), b"X") == (
        theirs.SerializeToString().replace(MISSING.encode(), b"X")
    )


async def test_a_tenant_admin_reaches_no_other_tenant(keyed_server):
    operator = keyed_server.admin
    admin_a = keyed_server.session(await keyed_server.key("team-a", admin_pb2.ROLE_ADMIN))
    member_b = keyed_server.session(await keyed_server.member_key("team-b", max_watchers=3))
    b_keys = await operator.admin.ListApiKeys(
        admin_pb2.ListApiKeysRequest(tenant="team-b"), metadata=operator.metadata
    )
    b_before = await operator.admin.GetTenant(
        admin_pb2.GetTenantRequest(tenant="team-b"), metadata=operator.metadata
    )
    a, md = admin_a.admin, admin_a.metadata

    def on(tenant: str):
        """Every AdminService RPC that names a tenant, aimed at `tenant`."""
        return {
            "CreateApiKey": lambda: a.CreateApiKey(
                admin_pb2.CreateApiKeyRequest(tenant=tenant), metadata=md
            ),
            "CreateApiKey admin": lambda: a.CreateApiKey(
                admin_pb2.CreateApiKeyRequest(tenant=tenant, role=admin_pb2.ROLE_ADMIN),
                metadata=md,
            ),
            "ListApiKeys": lambda: a.ListApiKeys(
                admin_pb2.ListApiKeysRequest(tenant=tenant, include_revoked=True), metadata=md
            ),
            "SetTenant": lambda: a.SetTenant(
                admin_pb2.SetTenantRequest(tenant=tenant, quota=admin_pb2.Quota(max_watchers=1000)),
                metadata=md,
            ),
            "GetTenant": lambda: a.GetTenant(
                admin_pb2.GetTenantRequest(tenant=tenant), metadata=md
            ),
            "SetProviderKey": lambda: a.SetProviderKey(
                admin_pb2.SetProviderKeyRequest(tenant=tenant, provider="openai"), metadata=md
            ),
            "GetUsage": lambda: a.GetUsage(admin_pb2.GetUsageRequest(tenant=tenant), metadata=md),
        }

    missing_answers = {rpc: await refused(call) for rpc, call in on(MISSING).items()}
    for rpc, call in on("team-b").items():
        same_answer(await refused(call), missing_answers[rpc], "team-b")

    # B's key, revoked by A's admin, is a key that does not exist; it keeps working.
    (b_key,) = b_keys.keys
    revoke_b = await refused(
        lambda: a.RevokeApiKey(admin_pb2.RevokeApiKeyRequest(name=b_key.name), metadata=md)
    )
    revoke_missing = await refused(
        lambda: a.RevokeApiKey(admin_pb2.RevokeApiKeyRequest(name="keys/000000000000"), metadata=md)
    )
    assert revoke_b.code() == revoke_missing.code() == grpc.StatusCode.NOT_FOUND
    assert revoke_b.details().replace(b_key.name, "keys/000000000000") == revoke_missing.details()
    await member_b.rank.ListJobs(rank_pb2.ListJobsRequest(), metadata=member_b.metadata)

    # Listing shows the admin's own tenant only.
    listed = await a.ListApiKeys(admin_pb2.ListApiKeysRequest(include_revoked=True), metadata=md)
    assert {key.tenant for key in listed.keys} == {"team-a"}
    tenants = await a.ListTenants(admin_pb2.ListTenantsRequest(), metadata=md)
    assert [t.name for t in tenants.tenants] == ["tenants/team-a"]

    # Nothing of B's changed, and no tenant was made on the side.
    after = await operator.admin.ListApiKeys(
        admin_pb2.ListApiKeysRequest(tenant="team-b", include_revoked=True),
        metadata=operator.metadata,
    )
    assert list(after.keys) == list(b_keys.keys)
    b_after = await operator.admin.GetTenant(
        admin_pb2.GetTenantRequest(tenant="team-b"), metadata=operator.metadata
    )
    assert b_after == b_before
    everyone = await operator.admin.ListTenants(
        admin_pb2.ListTenantsRequest(), metadata=operator.metadata
    )
    assert [t.name for t in everyone.tenants] == [
        "tenants/ops",
        "tenants/team-a",
        "tenants/team-b",
    ]


async def test_a_tenant_admin_manages_its_own_tenant_but_makes_no_operator(keyed_server):
    admin_a = keyed_server.session(await keyed_server.key("team-a", admin_pb2.ROLE_ADMIN))
    a, md = admin_a.admin, admin_a.metadata
    member = await a.CreateApiKey(admin_pb2.CreateApiKeyRequest(tenant="team-a"), metadata=md)
    await a.CreateApiKey(
        admin_pb2.CreateApiKeyRequest(tenant="team-a", role=admin_pb2.ROLE_ADMIN), metadata=md
    )
    before = await a.GetTenant(admin_pb2.GetTenantRequest(tenant="team-a"), metadata=md)
    own_quota = await refused(
        lambda: a.SetTenant(
            admin_pb2.SetTenantRequest(tenant="team-a", quota=admin_pb2.Quota(max_watchers=9999)),
            metadata=md,
        )
    )
    # Quotas bound the platform's spend: an admin reads its own but only the operator sets them.
    assert own_quota.code() == grpc.StatusCode.PERMISSION_DENIED
    assert "operator" in own_quota.details()
    after = await a.GetTenant(admin_pb2.GetTenantRequest(tenant="team-a"), metadata=md)
    assert after == before
    assert (await a.GetUsage(admin_pb2.GetUsageRequest(), metadata=md)).tenant == "team-a"
    revoked = await a.RevokeApiKey(admin_pb2.RevokeApiKeyRequest(name=member.key.name), metadata=md)
    assert revoked.HasField("revoke_time")

    operator_key = await refused(
        lambda: a.CreateApiKey(
            admin_pb2.CreateApiKeyRequest(tenant="team-a", role=admin_pb2.ROLE_OPERATOR),
            metadata=md,
        )
    )
    assert operator_key.code() == grpc.StatusCode.PERMISSION_DENIED
    assert "operator" in operator_key.details()


async def test_the_operator_acts_on_every_tenant(keyed_server):
    operator = keyed_server.admin
    o, md = operator.admin, operator.metadata
    await keyed_server.member_key("team-b")
    made = await o.CreateApiKey(
        admin_pb2.CreateApiKeyRequest(tenant="team-b", role=admin_pb2.ROLE_ADMIN), metadata=md
    )
    listed = await o.ListApiKeys(admin_pb2.ListApiKeysRequest(), metadata=md)
    assert {key.tenant for key in listed.keys} == {"ops", "team-b"}
    tenant = await o.SetTenant(
        admin_pb2.SetTenantRequest(tenant="team-b", quota=admin_pb2.Quota(max_watchers=7)),
        metadata=md,
    )
    assert tenant.quota.max_watchers == 7
    usage = await o.GetUsage(admin_pb2.GetUsageRequest(tenant="team-b"), metadata=md)
    assert usage.tenant == "team-b" and usage.quota.max_watchers == 7
    await o.RevokeApiKey(admin_pb2.RevokeApiKeyRequest(name=made.key.name), metadata=md)

    second = await o.CreateApiKey(
        admin_pb2.CreateApiKeyRequest(tenant="ops", role=admin_pb2.ROLE_OPERATOR), metadata=md
    )
    assert second.key.role == admin_pb2.ROLE_OPERATOR
    session = keyed_server.session(second.secret)
    tenants = await session.admin.ListTenants(
        admin_pb2.ListTenantsRequest(), metadata=session.metadata
    )
    assert {t.name for t in tenants.tenants} == {"tenants/ops", "tenants/team-b"}


async def test_a_key_for_a_tenant_that_does_not_exist_is_refused(keyed_server):
    operator = keyed_server.admin
    error = await refused(
        lambda: operator.admin.CreateApiKey(
            admin_pb2.CreateApiKeyRequest(tenant="nosuchtenant"), metadata=operator.metadata
        )
    )
    assert error.code() == grpc.StatusCode.NOT_FOUND
    assert error.details() == (
        "tenants/nosuchtenant not found; an operator creates it with"
        " `tierank tenants set nosuchtenant`"
    )
    tenants = await operator.admin.ListTenants(
        admin_pb2.ListTenantsRequest(), metadata=operator.metadata
    )
    assert [t.name for t in tenants.tenants] == ["tenants/ops"]


async def test_an_admin_of_the_operators_tenant_cannot_revoke_an_operator(keyed_server):
    admin = keyed_server.session(await keyed_server.key("ops", admin_pb2.ROLE_ADMIN))
    keys = await admin.admin.ListApiKeys(admin_pb2.ListApiKeysRequest(), metadata=admin.metadata)
    operator_name = next(k.name for k in keys.keys if k.role == admin_pb2.ROLE_OPERATOR)
    denied = await refused(
        lambda: admin.admin.RevokeApiKey(
            admin_pb2.RevokeApiKeyRequest(name=operator_name), metadata=admin.metadata
        )
    )
    assert denied.code() == grpc.StatusCode.PERMISSION_DENIED
    operator = keyed_server.admin
    await operator.admin.ListTenants(admin_pb2.ListTenantsRequest(), metadata=operator.metadata)
