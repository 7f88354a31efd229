"""Every kind of bad input gets a precise error over real gRPC, and leaves nothing stored."""

from __future__ import annotations

import grpc
import pytest

from tierank.client._errors import error_from_rpc
from tierank.limits import MAX_CANDIDATES, MAX_DEADLINE_SECONDS
from tierank.v1 import rank_pb2


def _violations(error: grpc.aio.AioRpcError) -> dict[str, str]:
    return {v.field: v.description for v in error_from_rpc(error).field_violations}


def _break(spec: rank_pb2.JobSpec, case: str) -> None:
    if case == "empty query":
        spec.query = "  "
    elif case == "one candidate":
        del spec.candidates[1:]
    elif case == "duplicate id":
        spec.candidates[3].id = spec.candidates[1].id
    elif case == "empty id":
        spec.candidates[2].id = ""
    elif case == "empty text":
        spec.candidates[4].text = ""
    elif case == "k too small":
        spec.batch_size = 1
    elif case == "k too large":
        spec.batch_size = 21
    elif case == "top-k beyond pool":
        spec.top_k = len(spec.candidates) + 1
    elif case == "unknown provider":
        spec.judges[0].provider = "clairvoyant"
    elif case == "no judges":
        del spec.judges[:]
    elif case == "negative calls budget":
        spec.budget.max_judge_calls = -1
    elif case == "negative cost budget":
        spec.budget.max_cost_usd = -0.5
    elif case == "far-off deadline":
        spec.deadline_seconds = 1e308
    elif case == "NUL in the query":
        spec.query += "\0"
    elif case == "NUL in the rubric":
        spec.rubric = "relevant\0if"
    elif case == "NUL in a text":
        spec.candidates[4].text = "a passage\0with a NUL"
    elif case == "NUL in a metadata key":
        spec.candidates[2].metadata["no\0te"] = "v"
    elif case == "NUL in a metadata value":
        spec.candidates[2].metadata["note"] = "v\0"
    elif case == "oracle without scores":
        spec.judges[0].provider = "oracle"
        del spec.candidates[5].metadata["score"]
    else:
        raise AssertionError(case)


CASES = {
    "empty query": ("spec.query", "empty"),
    "one candidate": ("spec.candidates", "at least 2"),
    "duplicate id": ("spec.candidates[3].id", "duplicates candidates[1].id"),
    "empty id": ("spec.candidates[2].id", "empty"),
    "empty text": ("spec.candidates[4].text", "empty"),
    "k too small": ("spec.batch_size", "between 2 and 20"),
    "k too large": ("spec.batch_size", "between 2 and 20"),
    "top-k beyond pool": ("spec.top_k", "exceed the number of candidates"),
    "unknown provider": ("spec.judges[0].provider", "unknown provider 'clairvoyant'"),
    "no judges": ("spec.judges", "at least one judge"),
    "negative calls budget": ("spec.budget.max_judge_calls", "negative"),
    "negative cost budget": ("spec.budget.max_cost_usd", "negative"),
    "oracle without scores": ("spec.judges[0].parameters.options.score_key", "c005"),
    "far-off deadline": ("spec.deadline_seconds", f"between 0 and {MAX_DEADLINE_SECONDS:,}"),
    "NUL in the query": ("spec.query", "NUL"),
    "NUL in the rubric": ("spec.rubric", "NUL"),
    "NUL in a text": ("spec.candidates[4].text", "NUL"),
    "NUL in a metadata key": ("spec.candidates[2].metadata", "keys must not contain NUL"),
    "NUL in a metadata value": ("spec.candidates[2].metadata['note']", "NUL"),
}


@pytest.mark.parametrize("case", sorted(CASES))
async def test_bad_spec_is_invalid_argument_naming_field_and_rule(stub, make_spec, case):
    spec = make_spec(n=12)
    _break(spec, case)
    for call in (
        stub.CreateJob(rank_pb2.CreateJobRequest(spec=spec, request_id=f"bad-{case}")),
        stub.Rank(rank_pb2.RankRequest(spec=spec)).read(),
    ):
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await call
        assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        field, rule = CASES[case]
        violations = _violations(caught.value)
        assert field in violations, violations
        assert rule in violations[field]
    listed = await stub.ListJobs(rank_pb2.ListJobsRequest())
    assert list(listed.jobs) == [], "a rejected job must leave nothing in storage"


async def test_too_many_candidates_names_the_documented_maximum(stub, make_spec):
    spec = make_spec(n=2)
    spec.candidates.extend(rank_pb2.Candidate(id=f"x{i}", text="t") for i in range(MAX_CANDIDATES))
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await stub.CreateJob(rank_pb2.CreateJobRequest(spec=spec))
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert f"at most {MAX_CANDIDATES}" in _violations(caught.value)["spec.candidates"]


async def test_oversized_message_is_resource_exhausted_with_the_limit(stub, make_spec):
    spec = make_spec(n=3)
    spec.candidates[0].text = "x" * (5 * 1024 * 1024)  # the test server allows 4 MiB
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await stub.CreateJob(rank_pb2.CreateJobRequest(spec=spec))
    assert caught.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert str(4 * 1024 * 1024) in caught.value.details()
    assert list((await stub.ListJobs(rank_pb2.ListJobsRequest())).jobs) == []


@pytest.mark.parametrize("rpc", ["GetJob", "CancelJob", "WatchJob"])
async def test_unknown_job_is_not_found(stub, rpc):
    request = {
        "GetJob": rank_pb2.GetJobRequest,
        "CancelJob": rank_pb2.CancelJobRequest,
        "WatchJob": rank_pb2.WatchJobRequest,
    }[rpc](name="jobs/doesnotexist")
    call = getattr(stub, rpc)(request)
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await (call.read() if rpc == "WatchJob" else call)
    assert caught.value.code() == grpc.StatusCode.NOT_FOUND
    assert "jobs/doesnotexist" in caught.value.details()


async def test_malformed_name_and_page_token_are_invalid_argument(stub):
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await stub.GetJob(rank_pb2.GetJobRequest(name="job-17"))
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "name" in _violations(caught.value)
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await stub.ListJobs(rank_pb2.ListJobsRequest(page_token="%%%"))
    assert "page_token" in _violations(caught.value)
