"""Start-up and introspection at the edge: one server per port, health and reflection."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2

from tierank.client import LocalServer
from tierank.v1 import rank_pb2, rank_pb2_grpc


def test_a_second_server_on_a_taken_port_fails_at_start_naming_the_address(tmp_path: Path):
    with LocalServer(db=tmp_path / "first.db", extra_args=("--log-level", "warning")) as first:
        second = subprocess.run(
            [
                *(sys.executable, "-m", "tierank.server", "--listen", first.address),
                *("--db", str(tmp_path / "second.db"), "--log-level", "warning"),
            ],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert second.returncode == 1
        lines = second.stderr.strip().splitlines()
        assert len(lines) == 1, second.stderr
        assert first.address in lines[0] and "in use" in lines[0]
        # Every connection still reaches the first server and its database.
        with grpc.insecure_channel(first.address) as channel:
            for _ in range(6):
                listed = rank_pb2_grpc.RankServiceStub(channel).ListJobs(
                    rank_pb2.ListJobsRequest(), timeout=10
                )
                assert list(listed.jobs) == []
    assert not (tmp_path / "second.db").exists(), "a server that cannot serve opens nothing"


async def test_health_answers_serving_for_both_services(server_address: str):
    async with grpc.aio.insecure_channel(server_address) as channel:
        health = health_pb2_grpc.HealthStub(channel)
        for service in ("", "tierank.v1.RankService", "tierank.v1.EvalService"):
            answer = await health.Check(health_pb2.HealthCheckRequest(service=service))
            assert answer.status == health_pb2.HealthCheckResponse.SERVING, service


async def _list_services(channel: grpc.aio.Channel, package: str) -> list[str]:
    # grpcio-reflection ships only v1alpha messages; v1 is the same wire format.
    call = channel.stream_stream(
        f"/{package}.ServerReflection/ServerReflectionInfo",
        request_serializer=reflection_pb2.ServerReflectionRequest.SerializeToString,
        response_deserializer=reflection_pb2.ServerReflectionResponse.FromString,
    )(iter([reflection_pb2.ServerReflectionRequest(list_services="")]))
    answers = [answer async for answer in call]
    return [s.name for s in answers[0].list_services_response.service]


async def _describes(channel: grpc.aio.Channel, package: str, symbol: str) -> bool:
    call = channel.stream_stream(
        f"/{package}.ServerReflection/ServerReflectionInfo",
        request_serializer=reflection_pb2.ServerReflectionRequest.SerializeToString,
        response_deserializer=reflection_pb2.ServerReflectionResponse.FromString,
    )(iter([reflection_pb2.ServerReflectionRequest(file_containing_symbol=symbol)]))
    answers = [answer async for answer in call]
    return bool(answers[0].file_descriptor_response.file_descriptor_proto)


async def test_reflection_answers_on_v1_and_v1alpha(server_address: str):
    async with grpc.aio.insecure_channel(server_address) as channel:
        for package in ("grpc.reflection.v1", "grpc.reflection.v1alpha"):
            services = await _list_services(channel, package)
            assert {"tierank.v1.RankService", "tierank.v1.EvalService"} <= set(services)
            assert "grpc.reflection.v1.ServerReflection" in services
            assert await _describes(channel, package, "tierank.v1.RankService")
            assert await _describes(channel, package, "tierank.v1.EvalService")
