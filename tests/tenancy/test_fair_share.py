"""A tenant created without limits gets the server's defaults, and one tenant at its watcher
limit, with jobs running, does not stall another tenant's calls."""

from __future__ import annotations

import asyncio
import time

import grpc

from tierank.server.storage.base import DEFAULT_LIMITS
from tierank.v1 import admin_pb2, rank_pb2

# A's watchers ask for more than its default limit; spread so no job passes its own cap.
WATCHED_JOBS = 2
ASKED_WATCHERS = DEFAULT_LIMITS.max_watchers + 50


async def _new_tenant(keyed_server, tenant: str):
    admin = keyed_server.admin
    made = await admin.admin.SetTenant(
        admin_pb2.SetTenantRequest(tenant=tenant), metadata=admin.metadata
    )
    return made, keyed_server.session(await keyed_server.member_key(tenant))


async def test_new_tenants_get_default_limits_and_one_at_its_limit_does_not_stall_another(
    keyed_server, make_spec, oracle_judge
) -> None:
    made, a = await _new_tenant(keyed_server, "team-a")
    assert made.quota.max_watchers == DEFAULT_LIMITS.max_watchers
    assert made.quota.max_concurrent_jobs == DEFAULT_LIMITS.max_concurrent_jobs
    _, b = await _new_tenant(keyed_server, "team-b")

    b_job = await b.rank.CreateJob(
        rank_pb2.CreateJobRequest(spec=make_spec(n=8)), metadata=b.metadata
    )
    slow = [oracle_judge(noise=0.3, latency_ms="1000")]
    a_jobs = [
        await a.rank.CreateJob(
            rank_pb2.CreateJobRequest(spec=make_spec(n=40, top_k=0, judges=slow, seed=seed)),
            metadata=a.metadata,
        )
        for seed in range(WATCHED_JOBS)
    ]
    refused: list[str] = []

    async def watch(name: str) -> None:
        request = rank_pb2.WatchJobRequest(name=name)
        try:
            async for _ in a.rank.WatchJob(request, metadata=a.metadata):
                pass
        except grpc.aio.AioRpcError as error:
            if error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED:
                refused.append(error.details())
            elif error.code() != grpc.StatusCode.CANCELLED:
                raise

    watchers = [
        asyncio.create_task(watch(a_jobs[i % WATCHED_JOBS].name)) for i in range(ASKED_WATCHERS)
    ]
    try:
        expected_refusals = ASKED_WATCHERS - DEFAULT_LIMITS.max_watchers
        for _ in range(200):  # the streams are opened (or refused) in a moment
            if len(refused) >= expected_refusals:
                break
            await asyncio.sleep(0.05)
        slowest = 0.0
        for _ in range(20):
            started = time.monotonic()
            job = await b.rank.GetJob(rank_pb2.GetJobRequest(name=b_job.name), metadata=b.metadata)
            slowest = max(slowest, time.monotonic() - started)
            assert job.name == b_job.name
            await asyncio.sleep(0.05)
        # Generous, not a speed target: a stalled server answers in seconds, not these.
        assert slowest < 5.0, f"team-b's GetJob took {slowest:.1f} s"
        assert len(refused) == expected_refusals
        assert all("max_watchers" in detail for detail in refused)
    finally:
        for task in watchers:
            task.cancel()
        await asyncio.gather(*watchers, return_exceptions=True)
        for job in a_jobs:
            await a.rank.CancelJob(rank_pb2.CancelJobRequest(name=job.name), metadata=a.metadata)
