"""Mutual TLS end to end: a client certificate whose subject an admin mapped to a key
authenticates as that key without a bearer token; an unmapped, revoked or untrusted one gets
nothing."""

from __future__ import annotations

import sys
from pathlib import Path

import grpc
import pytest
from google.rpc import error_details_pb2
from grpc_status import rpc_status

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from certs import issue, make_ca
from keyed import admin_tool, operator_key

from tierank.server.app import background_server
from tierank.server.settings import ServerSettings
from tierank.v1 import admin_pb2, admin_pb2_grpc, rank_pb2, rank_pb2_grpc

SUBJECT = "CN=team-a,O=Example"


def reason(error: grpc.aio.AioRpcError) -> str:
    for detail in rpc_status.from_call(error).details:
        info = error_details_pb2.ErrorInfo()
        if detail.Unpack(info):
            return info.reason
    return ""


def channel(address: str, server_ca: Path, cert: Path | None = None, key: Path | None = None):
    credentials = grpc.ssl_channel_credentials(
        root_certificates=server_ca.read_bytes(),
        private_key=key.read_bytes() if key else None,
        certificate_chain=cert.read_bytes() if cert else None,
    )
    return grpc.aio.secure_channel(address, credentials)


async def test_a_mapped_client_certificate_is_its_keys_tenant(tmp_path):
    server_ca = make_ca(tmp_path, "server CA")
    client_ca = make_ca(tmp_path, "client CA")
    stranger_ca = make_ca(tmp_path, "stranger CA")
    served = issue(server_ca, tmp_path, "localhost", server=True)
    team_a = issue(client_ca, tmp_path, "team-a", server=False, organization="Example")
    unmapped = issue(client_ca, tmp_path, "team-x", server=False, organization="Example")
    forged = issue(stranger_ca, tmp_path, "team-a", server=False, organization="Example")
    db = tmp_path / "t.db"
    admin_token = operator_key(db)
    for tenant in ("team-a", "team-b"):
        admin_tool(db, "SetTenant", {"tenant": tenant})
    settings = ServerSettings(
        listen="127.0.0.1:0",
        db=db,
        shutdown_grace_s=1.0,
        auth="keys",
        tls_cert=served.cert,
        tls_key=served.key,
        tls_client_ca=client_ca.cert,
    )
    async with background_server(settings) as address:
        # The admin connects with a certificate too (the server asks every client for one),
        # and authenticates with its bearer key.
        async with channel(address, served.ca, unmapped.cert, unmapped.key) as admin_channel:
            admin = admin_pb2_grpc.AdminServiceStub(admin_channel)
            md = (("authorization", f"Bearer {admin_token}"),)
            made = await admin.CreateApiKey(
                admin_pb2.CreateApiKeyRequest(tenant="team-a", certificate_subject=SUBJECT),
                metadata=md,
            )
            with pytest.raises(grpc.aio.AioRpcError) as twice:
                await admin.CreateApiKey(
                    admin_pb2.CreateApiKeyRequest(tenant="team-b", certificate_subject=SUBJECT),
                    metadata=md,
                )
            assert twice.value.code() == grpc.StatusCode.INVALID_ARGUMENT

            async with channel(address, served.ca, team_a.cert, team_a.key) as a_channel:
                stub = rank_pb2_grpc.RankServiceStub(a_channel)
                listed = await stub.ListJobs(rank_pb2.ListJobsRequest())
                assert not listed.jobs
                usage = await admin_pb2_grpc.AdminServiceStub(a_channel).GetUsage(
                    admin_pb2.GetUsageRequest()
                )
                assert usage.tenant == "team-a"
                # A member by certificate is still a member.
                with pytest.raises(grpc.aio.AioRpcError) as denied:
                    await admin_pb2_grpc.AdminServiceStub(a_channel).ListTenants(
                        admin_pb2.ListTenantsRequest()
                    )
                assert denied.value.code() == grpc.StatusCode.PERMISSION_DENIED

                await admin.RevokeApiKey(
                    admin_pb2.RevokeApiKeyRequest(name=made.key.name), metadata=md
                )
                with pytest.raises(grpc.aio.AioRpcError) as revoked:
                    await stub.ListJobs(rank_pb2.ListJobsRequest())
                assert revoked.value.code() == grpc.StatusCode.UNAUTHENTICATED

            stub = rank_pb2_grpc.RankServiceStub(admin_channel)
            with pytest.raises(grpc.aio.AioRpcError) as not_mapped:
                await stub.ListJobs(rank_pb2.ListJobsRequest())
            assert not_mapped.value.code() == grpc.StatusCode.UNAUTHENTICATED
            assert reason(not_mapped.value) == "CERTIFICATE_NOT_MAPPED"

        async with channel(address, served.ca, forged.cert, forged.key) as forged_channel:
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await rank_pb2_grpc.RankServiceStub(forged_channel).ListJobs(
                    rank_pb2.ListJobsRequest(), timeout=5
                )
            assert refused.value.code() == grpc.StatusCode.UNAVAILABLE
