"""Limits at the API edge: sizes checked before anything is stored, errors that fit in a
client's header limit, sane numeric ranges and enums, signed page tokens, watch streams that
end, and bounded judges and watchers per job."""

from __future__ import annotations

import asyncio
import base64
import math

import grpc
import pytest

from tierank.client._errors import error_from_rpc
from tierank.limits import MAX_JUDGES, MAX_QUERY_BYTES, MAX_WATCHERS_PER_JOB
from tierank.v1 import rank_pb2, rank_pb2_grpc

# What many HTTP/2 clients accept as a whole header block (grpc-go, Node, browsers' proxies).
CLIENT_HEADER_LIMIT = 8 * 1024


def _violations(error: grpc.aio.AioRpcError) -> dict[str, str]:
    return {v.field: v.description for v in error_from_rpc(error).field_violations}


async def _rejected(call, code=grpc.StatusCode.INVALID_ARGUMENT) -> grpc.aio.AioRpcError:
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await call
    assert caught.value.code() == code, caught.value.details()
    return caught.value


async def _stored(stub) -> int:
    return len((await stub.ListJobs(rank_pb2.ListJobsRequest())).jobs)


def _slow_oracle(latency_ms: int = 300) -> rank_pb2.JudgeSpec:
    options = {"noise": "0", "latency_ms": str(latency_ms)}
    return rank_pb2.JudgeSpec(
        provider="oracle", parameters=rank_pb2.JudgeParameters(options=options)
    )


# -- sizes (28) -----------------------------------------------------------------------------


async def test_an_oversize_query_is_refused_and_nothing_is_stored(stub, make_spec):
    spec = make_spec(n=3)
    spec.query = "q" * (2 * 1024 * 1024)  # 2 MiB: under the test server's 4 MiB limit
    error = await _rejected(stub.CreateJob(rank_pb2.CreateJobRequest(spec=spec)))
    assert f"at most {MAX_QUERY_BYTES} bytes" in _violations(error)["spec.query"]
    assert await _stored(stub) == 0


async def test_a_spec_that_would_outgrow_the_limit_is_refused_before_storing(stub, make_spec):
    # Under the 4 MiB request limit, but with its tiers and stats the job would not fit in
    # a response: GetJob would fail for ever once tiers exist.
    spec = make_spec(n=3)
    spec.candidates[0].text = "x" * (4 * 1024 * 1024 - 2000)
    for call in (
        stub.CreateJob(rank_pb2.CreateJobRequest(spec=spec)),
        stub.Rank(rank_pb2.RankRequest(spec=spec)).read(),
    ):
        error = await _rejected(call)
        assert "--max-message-mb" in _violations(error)["spec"]
    assert await _stored(stub) == 0


async def test_list_pages_are_cut_by_size_and_tokens_continue_them(stub, make_spec):
    names = []
    for _ in range(6):
        spec = make_spec(n=3)
        spec.candidates[0].text = "x" * (900 * 1024)
        names.append((await stub.CreateJob(rank_pb2.CreateJobRequest(spec=spec))).name)
    seen, token, pages = [], "", 0
    while True:
        page = await stub.ListJobs(
            rank_pb2.ListJobsRequest(view=rank_pb2.JOB_VIEW_FULL, page_token=token)
        )
        assert page.ByteSize() < 4 * 1024 * 1024
        seen += [j.name for j in page.jobs]
        pages += 1
        token = page.next_page_token
        if not token:
            break
    assert seen == names[::-1] and pages >= 2


# -- errors that fit (29) -------------------------------------------------------------------


async def _small_header_stub(server_address):
    channel = grpc.aio.insecure_channel(
        server_address, options=[("grpc.max_metadata_size", CLIENT_HEADER_LIMIT)]
    )
    return channel, rank_pb2_grpc.RankServiceStub(channel)


@pytest.mark.parametrize("case", ["300 empty texts", "6,000-char provider", "3,000-char name"])
async def test_errors_fit_in_an_8_kib_header_limit(server_address, make_spec, case):
    channel, stub = await _small_header_stub(server_address)
    async with channel:
        spec = make_spec(n=300)
        if case == "300 empty texts":
            for candidate in spec.candidates:
                candidate.text = ""
            call = stub.CreateJob(rank_pb2.CreateJobRequest(spec=spec))
        elif case == "6,000-char provider":
            spec.judges[0].provider = "p" * 6000
            call = stub.CreateJob(rank_pb2.CreateJobRequest(spec=spec))
        else:
            call = stub.GetJob(rank_pb2.GetJobRequest(name="jobs/" + "n" * 3000))
        error = await _rejected(call)
        size = sum(len(k) + len(v) for k, v in error.trailing_metadata())
        assert size < CLIENT_HEADER_LIMIT - 2048, size
        violations = _violations(error)
        if case == "300 empty texts":
            assert len(violations) <= 21 and "spec.candidates[0].text" in violations
            assert any("more" in rule for rule in violations.values())


# -- numbers, enums and tokens (33) ---------------------------------------------------------


@pytest.mark.parametrize("weight", [math.inf, -math.inf, math.nan, 1e-10, 1e9, -1.0])
async def test_weights_outside_a_sane_range_are_refused(stub, make_spec, weight):
    spec = make_spec(n=4)
    spec.judges[0].weight = weight
    error = await _rejected(stub.CreateJob(rank_pb2.CreateJobRequest(spec=spec)))
    assert "between 0.001 and 1000" in _violations(error)["spec.judges[0].weight"]
    assert await _stored(stub) == 0


async def test_unknown_enum_numbers_are_refused(stub, make_spec):
    spec = make_spec(n=4, ensemble_mode=99)
    error = await _rejected(stub.CreateJob(rank_pb2.CreateJobRequest(spec=spec)))
    assert "spec.ensemble_mode" in _violations(error)
    error = await _rejected(stub.ListJobs(rank_pb2.ListJobsRequest(state=99)))
    assert "state" in _violations(error)
    assert await _stored(stub) == 0


async def test_page_tokens_are_signed_and_tied_to_their_filter(stub, make_spec):
    names = [
        (await stub.CreateJob(rank_pb2.CreateJobRequest(spec=make_spec(n=3)))).name
        for _ in range(3)
    ]
    first = await stub.ListJobs(rank_pb2.ListJobsRequest(page_size=1))
    second = await stub.ListJobs(
        rank_pb2.ListJobsRequest(page_size=1, page_token=first.next_page_token)
    )
    assert [j.name for j in (*first.jobs, *second.jobs)] == names[:0:-1]
    forged = base64.urlsafe_b64encode(names[1].removeprefix("jobs/").encode()).decode()
    for token in (forged, first.next_page_token[:-2] + "AA", "x" * 5000):
        error = await _rejected(stub.ListJobs(rank_pb2.ListJobsRequest(page_token=token)))
        assert "page_token" in _violations(error)
    other_filter = rank_pb2.ListJobsRequest(
        page_token=first.next_page_token, state=rank_pb2.JOB_STATE_RUNNING
    )
    assert "page_token" in _violations(await _rejected(stub.ListJobs(other_filter)))


# -- watch streams end (32) -----------------------------------------------------------------


async def test_watching_past_the_end_is_out_of_range_and_a_waiting_watcher_ends(stub, make_spec):
    spec = make_spec(n=12, judges=[_slow_oracle(200)], batch_size=4)
    job = await stub.CreateJob(rank_pb2.CreateJobRequest(spec=spec))
    now = await stub.GetJob(rank_pb2.GetJobRequest(name=job.name))
    beyond = rank_pb2.WatchJobRequest(name=job.name, after_sequence=now.last_sequence + 5)
    error = await _rejected(stub.WatchJob(beyond).read(), grpc.StatusCode.OUT_OF_RANGE)
    assert "after_sequence" in _violations(error)

    # A watcher waiting at the very end of the running job ends with the job.
    at_end = rank_pb2.WatchJobRequest(name=job.name, after_sequence=now.last_sequence)
    events = await asyncio.wait_for(_collect(stub.WatchJob(at_end)), timeout=60)
    assert events[-1].WhichOneof("kind") == "completed"
    finished = await stub.GetJob(rank_pb2.GetJobRequest(name=job.name))
    done = rank_pb2.WatchJobRequest(name=job.name, after_sequence=finished.last_sequence)
    assert await asyncio.wait_for(_collect(stub.WatchJob(done)), timeout=10) == []
    late = rank_pb2.WatchJobRequest(name=job.name, after_sequence=finished.last_sequence + 1)
    await _rejected(stub.WatchJob(late).read(), grpc.StatusCode.OUT_OF_RANGE)


async def _collect(call) -> list[rank_pb2.JobEvent]:
    return [event async for event in call]


# -- bounded judges and watchers (40) -------------------------------------------------------


async def test_judges_per_job_are_bounded(stub, make_spec):
    judges = [rank_pb2.JudgeSpec(provider="lexical", name=f"j{i}") for i in range(MAX_JUDGES + 1)]
    error = await _rejected(
        stub.CreateJob(rank_pb2.CreateJobRequest(spec=make_spec(n=4, judges=judges)))
    )
    assert f"at most {MAX_JUDGES}" in _violations(error)["spec.judges"]


async def test_watchers_per_job_are_bounded(stub, make_spec):
    spec = make_spec(n=12, judges=[_slow_oracle(5000)], batch_size=4)
    job = await stub.CreateJob(rank_pb2.CreateJobRequest(spec=spec))
    watchers = [
        stub.WatchJob(rank_pb2.WatchJobRequest(name=job.name)) for _ in range(MAX_WATCHERS_PER_JOB)
    ]
    try:
        for watcher in watchers:
            assert (await watcher.read()).sequence == 1
        extra = stub.WatchJob(rank_pb2.WatchJobRequest(name=job.name))
        error = await _rejected(extra.read(), grpc.StatusCode.RESOURCE_EXHAUSTED)
        assert str(MAX_WATCHERS_PER_JOB) in error.details()
        watchers.pop().cancel()
        await asyncio.sleep(0.2)
        again = stub.WatchJob(rank_pb2.WatchJobRequest(name=job.name))
        assert (await again.read()).sequence == 1, "a freed place can be taken again"
        again.cancel()
    finally:
        for watcher in watchers:
            watcher.cancel()
        await stub.CancelJob(rank_pb2.CancelJobRequest(name=job.name))
