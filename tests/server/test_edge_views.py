"""AIP-157 views and size bounds: every response about a maximal job fits a client that keeps
gRPC's default 4 MiB receive limit, and a job too big to answer about is never stored."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest

from tierank.limits import (
    MAX_CANDIDATES,
    MAX_ID_BYTES,
    MAX_JUDGE_NAME_BYTES,
    MAX_JUDGES,
    MAX_MODEL_BYTES,
    MAX_QUERY_BYTES,
    MAX_RUBRIC_BYTES,
)
from tierank.server.app import background_server
from tierank.server.settings import ServerSettings
from tierank.v1 import rank_pb2, rank_pb2_grpc

FOUR_MIB = 4 * 1024 * 1024


@pytest.fixture
async def roomy_address(tmp_path: Path) -> AsyncIterator[str]:
    """A server that accepts the 6 MB requests a 10,000-candidate pool makes."""
    settings = ServerSettings(
        listen="127.0.0.1:0", db=tmp_path / "t.db", shutdown_grace_s=1.0, max_message_mb=16
    )
    async with background_server(settings) as address:
        yield address


def maximal_spec() -> rank_pb2.JobSpec:
    """As large as validation allows in everything a BASIC response repeats."""
    candidates = [
        rank_pb2.Candidate(
            id=f"{i:05d}".ljust(MAX_ID_BYTES, "x"),
            text=f"passage {i} " + "solar panel words " * 30,
            metadata={"score": str(i)},
        )
        for i in range(MAX_CANDIDATES)
    ]
    judges = [
        # Oracle judges: cheap to build over 10,000 passages, which keeps the test fast.
        rank_pb2.JudgeSpec(
            provider="oracle",
            model="m" * MAX_MODEL_BYTES,
            name=f"{j:02d}".ljust(MAX_JUDGE_NAME_BYTES, "j"),
        )
        for j in range(MAX_JUDGES)
    ]
    return rank_pb2.JobSpec(
        query="q" * MAX_QUERY_BYTES,
        rubric="r" * MAX_RUBRIC_BYTES,
        candidates=candidates,
        judges=judges,
        budget=rank_pb2.Budget(max_judge_calls=40),
    )


async def test_every_response_about_a_maximal_job_fits_4_mib(roomy_address):
    spec = maximal_spec()
    assert spec.ByteSize() > 5 * 1024 * 1024
    options = [("grpc.max_receive_message_length", FOUR_MIB)]
    async with grpc.aio.insecure_channel(roomy_address, options=options) as channel:
        stub = rank_pb2_grpc.RankServiceStub(channel)
        job = await stub.CreateJob(rank_pb2.CreateJobRequest(spec=spec))
        assert job.ByteSize() < FOUR_MIB and len(job.spec.candidates) == MAX_CANDIDATES
        assert not job.spec.candidates[0].text and not job.spec.candidates[0].metadata

        events = [e async for e in stub.WatchJob(rank_pb2.WatchJobRequest(name=job.name))]
        assert events[-1].WhichOneof("kind") == "completed"
        assert sum(len(t.candidate_ids) for t in events[-1].completed.tiers) == MAX_CANDIDATES

        fetched = await stub.GetJob(rank_pb2.GetJobRequest(name=job.name))
        assert len(fetched.tiers) > 0 and len(fetched.stats.judges) == MAX_JUDGES
        assert fetched.ByteSize() < FOUR_MIB
        listed = await stub.ListJobs(rank_pb2.ListJobsRequest())
        assert [j.name for j in listed.jobs] == [job.name]
        cancelled = await stub.CancelJob(rank_pb2.CancelJobRequest(name=job.name))
        assert cancelled.name == job.name

        ranked = [e async for e in stub.Rank(rank_pb2.RankRequest(spec=spec))]
        assert ranked[-1].WhichOneof("kind") == "completed"

        # The whole spec is there for whoever asks for it, and only then.
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await stub.GetJob(rank_pb2.GetJobRequest(name=job.name, view=rank_pb2.JOB_VIEW_FULL))
        assert caught.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    roomy_options = [("grpc.max_receive_message_length", 16 * 1024 * 1024)]
    async with grpc.aio.insecure_channel(roomy_address, options=roomy_options) as roomy:
        stub = rank_pb2_grpc.RankServiceStub(roomy)
        full = await stub.GetJob(rank_pb2.GetJobRequest(name=job.name, view=rank_pb2.JOB_VIEW_FULL))
        assert full.spec == spec


async def test_views_in_get_create_and_list(stub, make_spec):
    spec = make_spec(n=6)
    basic = await stub.CreateJob(rank_pb2.CreateJobRequest(spec=spec))
    assert [c.id for c in basic.spec.candidates] == [c.id for c in spec.candidates]
    assert all(not c.text and not c.metadata for c in basic.spec.candidates)
    assert basic.spec.query == spec.query and basic.spec.judges == spec.judges
    full = await stub.GetJob(rank_pb2.GetJobRequest(name=basic.name, view=rank_pb2.JOB_VIEW_FULL))
    assert full.spec == spec
    listed = await stub.ListJobs(rank_pb2.ListJobsRequest(view=rank_pb2.JOB_VIEW_FULL))
    assert listed.jobs[0].spec == spec
    listed = await stub.ListJobs(rank_pb2.ListJobsRequest())
    assert not listed.jobs[0].HasField("spec")


@pytest.mark.parametrize("rpc", ["CreateJob", "GetJob", "ListJobs"])
async def test_an_unknown_view_is_invalid_argument(stub, make_spec, rpc):
    request = {
        "CreateJob": rank_pb2.CreateJobRequest(spec=make_spec(n=3), view=99),
        "GetJob": rank_pb2.GetJobRequest(name="jobs/abc", view=99),
        "ListJobs": rank_pb2.ListJobsRequest(view=99),
    }[rpc]
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await getattr(stub, rpc)(request)
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "view" in caught.value.details()
    assert list((await stub.ListJobs(rank_pb2.ListJobsRequest())).jobs) == []
