"""No secret leaves the server: after a full run with API keys, a tenant's own provider key and
the server's provider key, none of them is in the database files, the captured logs, the
Prometheus metrics or any response."""

from __future__ import annotations

import grpc
import pytest
from google.protobuf.message import Message
from graded_fakes import answer_by_grade
from keyed import FLAVOR, keyed_server_on, llm_spec, write_llm_config
from prometheus_client import REGISTRY, generate_latest

from tierank.v1 import admin_pb2, rank_pb2

SERVER_PROVIDER_KEY = "sk-server-provider-key-7f3a9c2e1b"
TENANT_PROVIDER_KEY = "sk-tenant-provider-key-d41d8cd98f"


async def test_no_key_appears_in_the_database_logs_metrics_or_responses(tmp_path, fake_llm, capsys):
    responses: list[Message] = []

    def keep(message):
        responses.append(message)
        return message

    answer_by_grade(fake_llm, [FLAVOR])
    config_path = write_llm_config(tmp_path, fake_llm, server_key=SERVER_PROVIDER_KEY)
    async with keyed_server_on(tmp_path / "t.db", judges_config=config_path) as server:
        admin = server.admin
        md = admin.metadata
        member_key = await server.member_key("team-a")
        revoked = await server.member_key("team-a")
        keep(
            await admin.admin.SetProviderKey(
                admin_pb2.SetProviderKeyRequest(
                    tenant="team-a", provider=FLAVOR, api_key=TENANT_PROVIDER_KEY
                ),
                metadata=md,
            )
        )
        member = server.session(member_key)
        spec = llm_spec(8)
        events = [
            keep(e)
            async for e in member.rank.Rank(
                rank_pb2.RankRequest(spec=spec), metadata=member.metadata
            )
        ]
        assert events[-1].HasField("completed")
        job_name = events[-1].job
        for event in events:
            if event.HasField("verdict"):
                keep(
                    await member.rank.GetVerdict(
                        rank_pb2.GetVerdictRequest(
                            name=f"{job_name}/verdicts/{event.verdict.call_id}"
                        ),
                        metadata=member.metadata,
                    )
                )
        keep(
            await member.rank.GetJob(
                rank_pb2.GetJobRequest(name=job_name, view=rank_pb2.JOB_VIEW_FULL),
                metadata=member.metadata,
            )
        )
        keep(await member.rank.ListJobs(rank_pb2.ListJobsRequest(), metadata=member.metadata))
        keep(await member.admin.GetUsage(admin_pb2.GetUsageRequest(), metadata=member.metadata))
        keys = keep(
            await admin.admin.ListApiKeys(
                admin_pb2.ListApiKeysRequest(include_revoked=True), metadata=md
            )
        )
        revoked_name = next(k.name for k in keys.keys if revoked.split("_")[1] in k.name)
        keep(
            await admin.admin.RevokeApiKey(
                admin_pb2.RevokeApiKeyRequest(name=revoked_name), metadata=md
            )
        )
        keep(await admin.admin.ListTenants(admin_pb2.ListTenantsRequest(), metadata=md))
        keep(await admin.admin.GetTenant(admin_pb2.GetTenantRequest(tenant="team-a"), metadata=md))
        # Denied calls are logged (audit); the key they carried must not be.
        with pytest.raises(grpc.aio.AioRpcError):
            await server.session(revoked).rank.ListJobs(
                rank_pb2.ListJobsRequest(), metadata=server.session(revoked).metadata
            )
        admin_secret = server.admin_token

    secrets = {
        "admin key": admin_secret,
        "member key": member_key,
        "revoked key": revoked,
        "server provider key": SERVER_PROVIDER_KEY,
        "tenant provider key": TENANT_PROVIDER_KEY,
    }
    # The secret part of an API key is what must never leak (its id prefix is public).
    needles = {
        name: value.split("_", 2)[2] if value.startswith("trk_") else value
        for name, value in secrets.items()
    }
    stored = b"".join(path.read_bytes() for path in tmp_path.glob("t.db*"))
    captured = capsys.readouterr()
    logs = captured.out + captured.err
    metrics = generate_latest(REGISTRY).decode()
    answers = b"".join(message.SerializeToString() for message in responses)
    assert "audit" in logs and "call denied" in logs  # the logs were captured
    for name, needle in needles.items():
        assert needle.encode() not in stored, f"{name} in the database"
        assert needle not in logs, f"{name} in the logs"
        assert needle not in metrics, f"{name} in the metrics"
        assert needle.encode() not in answers, f"{name} in a response"
