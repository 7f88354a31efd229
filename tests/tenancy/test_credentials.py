"""Credentials beyond one key on one call: several authorization headers, server reflection
with --auth keys, and open streams of a key that is revoked (one server on SQLite, and two
replicas on PostgreSQL)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2
from keyed import KeyedServer, Session, keyed_server_on, operator_key
from test_isolation import error_info

from tierank.client import candidate, job_spec, judge
from tierank.server.app import background_server
from tierank.server.settings import ServerSettings
from tierank.v1 import admin_pb2, rank_pb2

REFLECTION_METHODS = (
    "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo",
    "/grpc.reflection.v1.ServerReflection/ServerReflectionInfo",
)
# Far longer than the recheck interval, shorter than the job's first judge call (seconds).
STREAM_END_BOUND_S = 30


async def test_a_call_with_two_authorization_headers_is_refused(keyed_server):
    token = await keyed_server.member_key("team-a")
    valid = ("authorization", f"Bearer {token}")
    other = ("authorization", "Bearer trk_000000000000_" + "A" * 43)
    job = await keyed_server.session(token).rank.CreateJob(
        rank_pb2.CreateJobRequest(spec=_long_job()), metadata=(valid,)
    )
    rank = keyed_server.session(None).rank
    # Whichever comes last, and even twice the same valid key.
    for metadata in ((other, valid), (valid, other), (valid, valid)):
        calls = {
            "ListJobs": lambda md=metadata: rank.ListJobs(rank_pb2.ListJobsRequest(), metadata=md),
            "WatchJob": lambda md=metadata: _drain(
                rank.WatchJob(rank_pb2.WatchJobRequest(name=job.name), metadata=md)
            ),
        }
        for rpc, call in calls.items():
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await call()
            assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED, rpc
            assert error_info(refused.value).reason == "DUPLICATE_CREDENTIALS", rpc
            assert "send exactly one" in refused.value.details()
            assert token not in refused.value.details()


async def _drain(stream) -> list:
    return [event async for event in stream]


async def _reflect(channel: grpc.aio.Channel, method: str, metadata=()) -> list[str]:
    call = channel.stream_stream(
        method,
        request_serializer=reflection_pb2.ServerReflectionRequest.SerializeToString,
        response_deserializer=reflection_pb2.ServerReflectionResponse.FromString,
    )
    request = reflection_pb2.ServerReflectionRequest(list_services="")
    responses = [r async for r in call(iter([request]), metadata=metadata)]
    return [s.name for r in responses for s in r.list_services_response.service]


async def test_reflection_needs_a_key_and_health_does_not(tmp_path):
    async with keyed_server_on(tmp_path / "t.db", reflection=True) as server:
        member = server.session(await server.member_key("team-a"))
        for method in REFLECTION_METHODS:
            for token in (None, "trk_000000000000_" + "A" * 43):
                with pytest.raises(grpc.aio.AioRpcError) as refused:
                    await _reflect(server.channel, method, server.session(token).metadata)
                assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED, method
            services = await _reflect(server.channel, method, member.metadata)
            assert "tierank.v1.AdminService" in services, method
        # Load balancers probe health without a key.
        health = health_pb2_grpc.HealthStub(server.channel)
        answer = await health.Check(health_pb2.HealthCheckRequest())
        assert answer.status == health_pb2.HealthCheckResponse.SERVING


def _long_job() -> rank_pb2.JobSpec:
    """A job whose first judge call takes a minute: it runs, and streams wait, long enough."""
    pool = [candidate(f"c{i}", f"passage {i}", metadata={"score": str(i)}) for i in range(6)]
    return job_spec("q", pool, judges=[judge("oracle", options={"latency_ms": "60000"})])


async def _open_stream(session: Session, job: rank_pb2.Job) -> AsyncIterator[rank_pb2.JobEvent]:
    """A WatchJob stream of `session` on `job`, once its first event arrived."""
    stream = session.rank.WatchJob(
        rank_pb2.WatchJobRequest(name=job.name), metadata=session.metadata
    ).__aiter__()
    first = await anext(stream)
    assert first.HasField("accepted")
    return stream


async def _ends_revoked(stream: AsyncIterator[rank_pb2.JobEvent], key_name: str) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as ended:
        async with asyncio.timeout(STREAM_END_BOUND_S):
            async for event in stream:
                assert not event.HasField("completed"), "the job ended, not the stream"
    assert ended.value.code() == grpc.StatusCode.UNAUTHENTICATED
    assert error_info(ended.value).reason == "KEY_REVOKED"
    assert ended.value.details() == f"API key {key_name} was revoked"


async def _revoke_ends_its_streams(
    revoking: KeyedServer, watched: KeyedServer, tenant: str
) -> None:
    """A key's WatchJob and Rank streams on `watched` end once `revoking` revokes it; another
    key's stream on the same job stays open until the job ends."""
    doomed_token = await revoking.member_key(tenant)
    kept = watched.session(await revoking.member_key(tenant))
    doomed = watched.session(doomed_token)
    job = await doomed.rank.CreateJob(
        rank_pb2.CreateJobRequest(spec=_long_job()), metadata=doomed.metadata
    )
    watch = await _open_stream(doomed, job)
    kept_stream = await _open_stream(kept, job)
    rank = doomed.rank.Rank(
        rank_pb2.RankRequest(spec=_long_job()), metadata=doomed.metadata
    ).__aiter__()
    assert (await anext(rank)).HasField("accepted")

    keys = await revoking.admin.admin.ListApiKeys(
        admin_pb2.ListApiKeysRequest(tenant=tenant), metadata=revoking.admin.metadata
    )
    key_name = next(k.name for k in keys.keys if doomed_token.split("_")[1] in k.name)
    await revoking.admin.admin.RevokeApiKey(
        admin_pb2.RevokeApiKeyRequest(name=key_name), metadata=revoking.admin.metadata
    )
    await _ends_revoked(watch, key_name)
    await _ends_revoked(rank, key_name)

    # The other key's stream was never ended: it sees the job to its end.
    await kept.rank.CancelJob(rank_pb2.CancelJobRequest(name=job.name), metadata=kept.metadata)
    async with asyncio.timeout(STREAM_END_BOUND_S):
        rest = [event async for event in kept_stream]
    assert rest[-1].HasField("failed") or rest[-1].HasField("completed")


async def test_a_revoked_keys_open_streams_end(keyed_server):
    await _revoke_ends_its_streams(keyed_server, keyed_server, "team-a")


async def test_a_stream_ended_by_a_revoke_gives_its_watcher_slot_back(keyed_server):
    doomed_token = await keyed_server.member_key("team-w", max_watchers=1)
    doomed = keyed_server.session(doomed_token)
    job = await doomed.rank.CreateJob(
        rank_pb2.CreateJobRequest(spec=_long_job()), metadata=doomed.metadata
    )
    stream = await _open_stream(doomed, job)
    keys = await keyed_server.admin.admin.ListApiKeys(
        admin_pb2.ListApiKeysRequest(tenant="team-w"), metadata=keyed_server.admin.metadata
    )
    (key,) = keys.keys
    await keyed_server.admin.admin.RevokeApiKey(
        admin_pb2.RevokeApiKeyRequest(name=key.name), metadata=keyed_server.admin.metadata
    )
    await _ends_revoked(stream, key.name)
    # The tenant's one stream slot is free again for its other keys.
    other = keyed_server.session(await keyed_server.member_key("team-w", max_watchers=1))
    await _open_stream(other, job)


async def test_a_revoke_on_one_replica_ends_streams_on_another(schema_url):
    token = operator_key(schema_url)
    async with AsyncExitStack() as stack:
        replicas = []
        for _ in range(2):
            settings = ServerSettings(
                listen="127.0.0.1:0", db=schema_url, shutdown_grace_s=1.0, auth="keys"
            )
            address = await stack.enter_async_context(background_server(settings))
            channel = await stack.enter_async_context(grpc.aio.insecure_channel(address))
            replicas.append(KeyedServer(address, schema_url, channel, token))  # type: ignore[arg-type]
        await _revoke_ends_its_streams(replicas[0], replicas[1], "team-a")
