"""Durability: a job survives kill -9 and graceful shutdown, and no stored verdict is re-asked."""

from __future__ import annotations

import signal

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from tierank.client import LocalServer, LocalServerError
from tierank.v1 import rank_pb2, rank_pb2_grpc


def _watch(address: str, name: str, after: int = 0, stop_after: int | None = None):
    with grpc.insecure_channel(address) as channel:
        stub = rank_pb2_grpc.RankServiceStub(channel)
        events = []
        for event in stub.WatchJob(rank_pb2.WatchJobRequest(name=name, after_sequence=after)):
            events.append(event)
            if stop_after is not None and len(events) >= stop_after:
                break
        return events


def _create(address: str, spec: rank_pb2.JobSpec) -> str:
    with grpc.insecure_channel(address) as channel:
        stub = rank_pb2_grpc.RankServiceStub(channel)
        return stub.CreateJob(rank_pb2.CreateJobRequest(spec=spec, request_id="durable")).name


def _slow_spec(make_spec, oracle_judge) -> rank_pb2.JobSpec:
    return make_spec(
        n=60, top_k=0, max_in_flight=4, judges=[oracle_judge(noise=0.4, latency_ms="40")]
    )


def _assert_complete_and_unique(events: list[rank_pb2.JobEvent]) -> None:
    assert [e.sequence for e in events] == list(range(1, len(events) + 1))
    assert events[-1].completed.reason == rank_pb2.COMPLETION_REASON_SETTLED
    call_ids = [e.verdict.call_id for e in events if e.HasField("verdict")]
    assert len(call_ids) == len(set(call_ids)), "a stored verdict was asked for again"


def test_kill_9_mid_job_then_restart_completes_it(server_process, make_spec, oracle_judge):
    address = server_process.start()
    name = _create(address, _slow_spec(make_spec, oracle_judge))
    before = _watch(address, name, stop_after=12)
    verdicts_before = {e.verdict.call_id for e in before if e.HasField("verdict")}
    assert verdicts_before, "the job was under way when killed"
    server_process.kill9()

    address = server_process.start()
    after = _watch(address, name, after=before[-1].sequence)
    _assert_complete_and_unique(before + after)
    replay = _watch(address, name)
    assert replay[: len(before)] == before, "stored history is unchanged by the restart"
    assert {e.verdict.call_id for e in replay if e.HasField("verdict")} >= verdicts_before
    assert server_process.terminate() == 0


def test_graceful_shutdown_reports_not_serving_and_the_job_resumes(
    server_process, make_spec, oracle_judge
):
    address = server_process.start()
    name = _create(address, _slow_spec(make_spec, oracle_judge))
    before = _watch(address, name, stop_after=6)
    with grpc.insecure_channel(address) as channel:
        statuses = health_pb2_grpc.HealthStub(channel).Watch(health_pb2.HealthCheckRequest())
        assert next(statuses).status == health_pb2.HealthCheckResponse.SERVING
        server_process.signal(signal.SIGTERM)
        seen = []
        try:
            for status in statuses:
                seen.append(status.status)
        except grpc.RpcError as error:  # the stream ends when the server stops
            assert error.code() == grpc.StatusCode.UNAVAILABLE
    assert health_pb2.HealthCheckResponse.NOT_SERVING in seen
    assert server_process.terminate() == 0

    address = server_process.start()
    after = _watch(address, name, after=before[-1].sequence)
    _assert_complete_and_unique(before + after)
    with grpc.insecure_channel(address) as channel:
        job = rank_pb2_grpc.RankServiceStub(channel).GetJob(rank_pb2.GetJobRequest(name=name))
    assert job.state == rank_pb2.JOB_STATE_SUCCEEDED


def test_second_server_on_the_same_database_refuses_to_start(server_process):
    server_process.start()
    with pytest.raises(LocalServerError) as refused:
        LocalServer(db=server_process.db).start()
    assert "exited with code 1" in str(refused.value)
    assert "another tierank server" in str(refused.value)
