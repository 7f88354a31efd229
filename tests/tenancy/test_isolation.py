"""Every RPC of both services, called by one tenant on another's resources, answers exactly as
for a resource that does not exist, and changes nothing; credentials are checked on every RPC."""

from __future__ import annotations

import grpc
import pytest
from google.rpc import error_details_pb2
from grpc_status import rpc_status

from tierank.client import candidate, job_spec, judge
from tierank.v1 import admin_pb2, eval_pb2, rank_pb2

POOL = [
    candidate("bees", "honeybees dance to tell each other where the food is"),
    candidate("ants", "ants leave scent trails to food"),
    candidate("moon", "the moon has no atmosphere"),
    candidate("hive", "a hive of bees shares food by dancing"),
]


def spec() -> rank_pb2.JobSpec:
    return job_spec("how do bees share where food is", POOL, judges=[judge("lexical")])


async def finished_job(session) -> tuple[rank_pb2.Job, list[rank_pb2.JobEvent]]:
    job = await session.rank.CreateJob(
        rank_pb2.CreateJobRequest(spec=spec()), metadata=session.metadata
    )
    events = [
        e
        async for e in session.rank.WatchJob(
            rank_pb2.WatchJobRequest(name=job.name), metadata=session.metadata
        )
    ]
    return job, events


def status_of(error: grpc.aio.AioRpcError):
    return rpc_status.from_call(error)


def error_info(error: grpc.aio.AioRpcError) -> error_details_pb2.ErrorInfo:
    for detail in status_of(error).details:
        info = error_details_pb2.ErrorInfo()
        if detail.Unpack(info):
            return info
    raise AssertionError(f"no ErrorInfo in {error}")


def tier_labels(job_name: str) -> eval_pb2.TierLabels:
    return eval_pb2.TierLabels(jobs=[eval_pb2.JobTiers(job=job_name, query_id="q1")])


RUN = eval_pb2.TextFile(name="run", content="q1 Q0 bees 1 3.0 r\nq1 Q0 moon 2 2.0 r\n")


def calls_on_a_job(session, job_name: str, verdict_name: str):
    """(rpc, awaitable factory) for every RPC that names a job."""
    md = session.metadata
    r, e = session.rank, session.eval

    async def watch():
        return [x async for x in r.WatchJob(rank_pb2.WatchJobRequest(name=job_name), metadata=md)]

    return {
        "GetJob": lambda: r.GetJob(rank_pb2.GetJobRequest(name=job_name), metadata=md),
        "CancelJob": lambda: r.CancelJob(rank_pb2.CancelJobRequest(name=job_name), metadata=md),
        "WatchJob": watch,
        "GetVerdict": lambda: r.GetVerdict(
            rank_pb2.GetVerdictRequest(name=verdict_name), metadata=md
        ),
        "Evaluate": lambda: e.Evaluate(
            eval_pb2.EvaluateRequest(
                runs=[RUN], labels=eval_pb2.LabelSource(tiers=tier_labels(job_name))
            ),
            metadata=md,
        ),
        "CompareLabels": lambda: e.CompareLabels(
            eval_pb2.CompareLabelsRequest(
                a=eval_pb2.LabelSource(tiers=tier_labels(job_name)),
                b=eval_pb2.LabelSource(qrels=eval_pb2.TextFile(name="q", content="q1 0 bees 2\n")),
            ),
            metadata=md,
        ),
        "ExportQrels": lambda: e.ExportQrels(
            eval_pb2.ExportQrelsRequest(tiers=tier_labels(job_name)), metadata=md
        ),
    }


async def test_another_tenants_job_is_not_found_exactly_like_a_missing_one(keyed_server):
    alice = keyed_server.session(await keyed_server.member_key("team-a"))
    bob = keyed_server.session(await keyed_server.member_key("team-b"))
    job, events = await finished_job(alice)
    call_id = next(e.verdict.call_id for e in events if e.HasField("verdict"))
    before = await alice.rank.GetJob(rank_pb2.GetJobRequest(name=job.name), metadata=alice.metadata)
    missing = "jobs/0000000000000000000000"

    theirs = calls_on_a_job(bob, job.name, f"{job.name}/verdicts/{call_id}")
    nothing = calls_on_a_job(bob, missing, f"{missing}/verdicts/{call_id}")
    for rpc, call in theirs.items():
        with pytest.raises(grpc.aio.AioRpcError) as crossed:
            await call()
        with pytest.raises(grpc.aio.AioRpcError) as absent:
            await nothing[rpc]()
        assert crossed.value.code() == grpc.StatusCode.NOT_FOUND, rpc
        assert absent.value.code() == grpc.StatusCode.NOT_FOUND, rpc
        # The same answer but for the name asked about: existence does not leak.
        assert crossed.value.details().replace(job.name, missing) == absent.value.details(), rpc

    listed = await bob.rank.ListJobs(rank_pb2.ListJobsRequest(), metadata=bob.metadata)
    assert not listed.jobs
    after = await alice.rank.GetJob(rank_pb2.GetJobRequest(name=job.name), metadata=alice.metadata)
    assert after == before  # the cancel attempt changed nothing
    assert after.state == rank_pb2.JOB_STATE_SUCCEEDED

    # Alice herself can do all of it.
    for call in calls_on_a_job(alice, job.name, f"{job.name}/verdicts/{call_id}").values():
        await call()


def fill_request(request_id: str = "") -> eval_pb2.FillQrelsRequest:
    """Two holes graded by the oracle (from the passages' hidden scores)."""
    passages = "".join(
        f'{{"id": "{c.id}", "text": "{c.text}", "metadata": {{"score": "{i}"}}}}\n'
        for i, c in enumerate(POOL)
    )
    return eval_pb2.FillQrelsRequest(
        qrels=eval_pb2.TextFile(name="q", content="q1 0 bees 2\n"),
        runs=[eval_pb2.TextFile(name="r", content="q1 Q0 bees 1 3 s\nq1 Q0 ants 2 2 s\n")],
        topics=eval_pb2.TextFile(name="t", content="q1\thow do bees share food\n"),
        passages=eval_pb2.TextFile(name="p", content=passages),
        judge=rank_pb2.JudgeSpec(provider="oracle"),
        request_id=request_id,
    )


async def test_another_tenants_operation_is_not_found_exactly_like_a_missing_one(keyed_server):
    alice = keyed_server.session(await keyed_server.member_key("team-a"))
    bob = keyed_server.session(await keyed_server.member_key("team-b"))
    started = await alice.eval.StartFillQrels(fill_request("shared-id"), metadata=alice.metadata)
    watched = [
        o
        async for o in alice.eval.WatchOperation(
            eval_pb2.WatchOperationRequest(name=started.name), metadata=alice.metadata
        )
    ]
    assert watched[-1].state == rank_pb2.JOB_STATE_SUCCEEDED
    missing = "operations/0000000000000000000000"

    def calls(session, name: str):
        md = session.metadata

        async def watch():
            return [
                o
                async for o in session.eval.WatchOperation(
                    eval_pb2.WatchOperationRequest(name=name), metadata=md
                )
            ]

        return {
            "GetOperation": lambda: session.eval.GetOperation(
                eval_pb2.GetOperationRequest(name=name), metadata=md
            ),
            "CancelOperation": lambda: session.eval.CancelOperation(
                eval_pb2.CancelOperationRequest(name=name), metadata=md
            ),
            "WatchOperation": watch,
        }

    nothing = calls(bob, missing)
    for rpc, call in calls(bob, started.name).items():
        with pytest.raises(grpc.aio.AioRpcError) as crossed:
            await call()
        with pytest.raises(grpc.aio.AioRpcError) as absent:
            await nothing[rpc]()
        assert crossed.value.code() == grpc.StatusCode.NOT_FOUND, rpc
        assert absent.value.code() == grpc.StatusCode.NOT_FOUND, rpc
        assert crossed.value.details().replace(started.name, missing) == absent.value.details()
    listed = await bob.eval.ListOperations(eval_pb2.ListOperationsRequest(), metadata=bob.metadata)
    assert not listed.operations
    # Alice's request_id is hers: Bob's start with it starts an operation of his own.
    his = await bob.eval.StartFillQrels(fill_request("shared-id"), metadata=bob.metadata)
    assert his.name != started.name
    after = await alice.eval.GetOperation(
        eval_pb2.GetOperationRequest(name=started.name), metadata=alice.metadata
    )
    assert after == watched[-1]


async def test_request_ids_and_the_verdict_cache_are_per_tenant(keyed_server):
    alice = keyed_server.session(await keyed_server.member_key("team-a"))
    bob = keyed_server.session(await keyed_server.member_key("team-b"))
    request = rank_pb2.CreateJobRequest(spec=spec(), request_id="nightly-1")
    first = await alice.rank.CreateJob(request, metadata=alice.metadata)
    again = await alice.rank.CreateJob(request, metadata=alice.metadata)
    other = await bob.rank.CreateJob(request, metadata=bob.metadata)
    assert again.name == first.name
    assert other.name != first.name

    a_events = [
        e
        async for e in alice.rank.WatchJob(
            rank_pb2.WatchJobRequest(name=first.name), metadata=alice.metadata
        )
    ]
    _, second_run = await finished_job(alice)
    b_events = [
        e
        async for e in bob.rank.WatchJob(
            rank_pb2.WatchJobRequest(name=other.name), metadata=bob.metadata
        )
    ]
    assert any(not e.verdict.cached for e in a_events if e.HasField("verdict"))
    # The same batches again: served from alice's cache for alice, never from it for bob.
    assert all(e.verdict.cached for e in second_run if e.HasField("verdict"))
    assert not any(e.verdict.cached for e in b_events if e.HasField("verdict"))


def every_rpc(session):
    md = session.metadata
    r, e, a = session.rank, session.eval, session.admin
    name = "jobs/0000000000000000000000"

    async def stream(call):
        return [x async for x in call]

    return {
        "CreateJob": lambda: r.CreateJob(rank_pb2.CreateJobRequest(spec=spec()), metadata=md),
        "GetJob": lambda: r.GetJob(rank_pb2.GetJobRequest(name=name), metadata=md),
        "ListJobs": lambda: r.ListJobs(rank_pb2.ListJobsRequest(), metadata=md),
        "CancelJob": lambda: r.CancelJob(rank_pb2.CancelJobRequest(name=name), metadata=md),
        "WatchJob": lambda: stream(r.WatchJob(rank_pb2.WatchJobRequest(name=name), metadata=md)),
        "Rank": lambda: stream(r.Rank(rank_pb2.RankRequest(spec=spec()), metadata=md)),
        "GetVerdict": lambda: r.GetVerdict(
            rank_pb2.GetVerdictRequest(name=f"{name}/verdicts/b0.j0"), metadata=md
        ),
        "Evaluate": lambda: e.Evaluate(eval_pb2.EvaluateRequest(), metadata=md),
        "CompareLabels": lambda: e.CompareLabels(eval_pb2.CompareLabelsRequest(), metadata=md),
        "ExportQrels": lambda: e.ExportQrels(eval_pb2.ExportQrelsRequest(), metadata=md),
        "GradePairs": lambda: e.GradePairs(eval_pb2.GradePairsRequest(), metadata=md),
        "FillQrels": lambda: e.FillQrels(eval_pb2.FillQrelsRequest(), metadata=md),
        "StartFillQrels": lambda: e.StartFillQrels(eval_pb2.FillQrelsRequest(), metadata=md),
        "GetOperation": lambda: e.GetOperation(
            eval_pb2.GetOperationRequest(name="operations/0000"), metadata=md
        ),
        "ListOperations": lambda: e.ListOperations(eval_pb2.ListOperationsRequest(), metadata=md),
        "WatchOperation": lambda: stream(
            e.WatchOperation(eval_pb2.WatchOperationRequest(name="operations/0000"), metadata=md)
        ),
        **admin_rpcs(session),
        "GetUsage": lambda: a.GetUsage(admin_pb2.GetUsageRequest(), metadata=md),
    }


def admin_rpcs(session):
    md = session.metadata
    a = session.admin
    return {
        "CreateApiKey": lambda: a.CreateApiKey(
            admin_pb2.CreateApiKeyRequest(tenant="x"), metadata=md
        ),
        "ListApiKeys": lambda: a.ListApiKeys(admin_pb2.ListApiKeysRequest(), metadata=md),
        "RevokeApiKey": lambda: a.RevokeApiKey(
            admin_pb2.RevokeApiKeyRequest(name="keys/000000000000"), metadata=md
        ),
        "SetTenant": lambda: a.SetTenant(admin_pb2.SetTenantRequest(tenant="x"), metadata=md),
        "GetTenant": lambda: a.GetTenant(admin_pb2.GetTenantRequest(tenant="x"), metadata=md),
        "ListTenants": lambda: a.ListTenants(admin_pb2.ListTenantsRequest(), metadata=md),
        "SetProviderKey": lambda: a.SetProviderKey(
            admin_pb2.SetProviderKeyRequest(tenant="x", provider="openai"), metadata=md
        ),
    }


async def test_every_rpc_needs_a_valid_unrevoked_key(keyed_server):
    member = await keyed_server.member_key("team-a")
    revoked_key = await keyed_server.member_key("team-a")
    keys = await keyed_server.admin.admin.ListApiKeys(
        admin_pb2.ListApiKeysRequest(tenant="team-a"), metadata=keyed_server.admin.metadata
    )
    revoked_name = next(k.name for k in keys.keys if revoked_key.split("_")[1] in k.name)
    # Works before the revoke, refused on the very next call after it.
    await keyed_server.session(revoked_key).rank.ListJobs(
        rank_pb2.ListJobsRequest(), metadata=keyed_server.session(revoked_key).metadata
    )
    await keyed_server.admin.admin.RevokeApiKey(
        admin_pb2.RevokeApiKeyRequest(name=revoked_name), metadata=keyed_server.admin.metadata
    )
    wrong_secret = member[:-4] + ("AAAA" if not member.endswith("AAAA") else "BBBB")
    cases = {
        None: "MISSING_CREDENTIALS",
        "not-a-key": "INVALID_API_KEY",
        wrong_secret: "INVALID_API_KEY",
        "trk_000000000000_" + "A" * 43: "INVALID_API_KEY",
        revoked_key: "KEY_REVOKED",
    }
    for token, reason in cases.items():
        session = keyed_server.session(token)
        for rpc, call in every_rpc(session).items():
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await call()
            assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED, (rpc, token)
            assert error_info(refused.value).reason == reason, (rpc, token)
            # The key itself is never echoed back.
            if token:
                assert token not in refused.value.details()


async def test_a_member_calling_an_admin_rpc_is_denied(keyed_server):
    member = keyed_server.session(await keyed_server.member_key("team-a"))
    for rpc, call in admin_rpcs(member).items():
        with pytest.raises(grpc.aio.AioRpcError) as denied:
            await call()
        assert denied.value.code() == grpc.StatusCode.PERMISSION_DENIED, rpc
    with pytest.raises(grpc.aio.AioRpcError) as denied:
        await member.admin.GetUsage(
            admin_pb2.GetUsageRequest(tenant="team-b"), metadata=member.metadata
        )
    # Another tenant does not exist for a member: no hint that team-b does.
    assert denied.value.code() == grpc.StatusCode.NOT_FOUND
    own = await member.admin.GetUsage(admin_pb2.GetUsageRequest(), metadata=member.metadata)
    assert own.tenant == "team-a"


async def test_health_needs_no_key_and_reflection_is_off_with_keys(keyed_server):
    from grpc_health.v1 import health_pb2, health_pb2_grpc
    from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

    health = health_pb2_grpc.HealthStub(keyed_server.channel)
    answer = await health.Check(health_pb2.HealthCheckRequest())
    assert answer.status == health_pb2.HealthCheckResponse.SERVING
    stub = reflection_pb2_grpc.ServerReflectionStub(keyed_server.channel)
    with pytest.raises(grpc.aio.AioRpcError) as off:
        async for _ in stub.ServerReflectionInfo(
            iter([reflection_pb2.ServerReflectionRequest(list_services="")])
        ):
            pass
    assert off.value.code() == grpc.StatusCode.UNIMPLEMENTED
