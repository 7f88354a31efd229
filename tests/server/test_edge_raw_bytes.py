"""Requests as raw bytes: malformed messages and oversize ones get a clear status, never
UNKNOWN, on every RPC of both services, unary and streaming alike."""

from __future__ import annotations

import grpc
import pytest
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.rpc import error_details_pb2
from grpc_status import rpc_status

from tierank.v1 import eval_pb2, rank_pb2

RPCS = {
    "/tierank.v1.RankService/CreateJob": "unary",
    "/tierank.v1.RankService/GetJob": "unary",
    "/tierank.v1.RankService/ListJobs": "unary",
    "/tierank.v1.RankService/CancelJob": "unary",
    "/tierank.v1.RankService/GetVerdict": "unary",
    "/tierank.v1.RankService/WatchJob": "stream",
    "/tierank.v1.RankService/Rank": "stream",
    "/tierank.v1.EvalService/Evaluate": "unary",
    "/tierank.v1.EvalService/CompareLabels": "unary",
    "/tierank.v1.EvalService/ExportQrels": "unary",
    "/tierank.v1.EvalService/GradePairs": "unary",
    "/tierank.v1.EvalService/FillQrels": "unary",
    "/tierank.v1.EvalService/StartFillQrels": "unary",
    "/tierank.v1.EvalService/GetOperation": "unary",
    "/tierank.v1.EvalService/WatchOperation": "stream",
}
_valid = rank_pb2.CreateJobRequest(
    spec=rank_pb2.JobSpec(query="q", candidates=[rank_pb2.Candidate(id="a", text="t")])
).SerializeToString()
MALFORMED = {
    "garbage": b"\xff" * 64,
    "truncated": _valid[: len(_valid) // 2],
    "invalid utf-8": b"",  # per method: see _invalid_utf8
    # Start-group tags nested far deeper than any parser allows.
    "nested groups": b"\x0b" * 100_000,
}


def _invalid_utf8(descriptor: Descriptor) -> bytes:
    """The request's first string field (inside sub-messages if need be) holding bytes that
    are not UTF-8."""
    for field in descriptor.fields:
        tag = bytes([(field.number << 3) | 2])
        if field.type == FieldDescriptor.TYPE_STRING:
            return tag + b"\x02\xff\xfe"
        if (
            field.type == FieldDescriptor.TYPE_MESSAGE
            and not field.message_type.GetOptions().map_entry
        ):
            inner = _invalid_utf8(field.message_type)
            if inner:
                return tag + _varint(len(inner)) + inner
    return b""


def _payload(method: str, kind: str) -> bytes:
    if kind != "invalid utf-8":
        return MALFORMED[kind]
    service, name = method.strip("/").split("/")
    module = rank_pb2 if service.endswith("RankService") else eval_pb2
    descriptor = module.DESCRIPTOR.services_by_name[service.split(".")[-1]]
    return _invalid_utf8(descriptor.methods_by_name[name].input_type)


async def _call(channel: grpc.aio.Channel, method: str, payload: bytes) -> None:
    identity = {"request_serializer": None, "response_deserializer": None}
    if RPCS[method] == "unary":
        await channel.unary_unary(method, **identity)(payload, timeout=30)
    else:
        async for _ in channel.unary_stream(method, **identity)(payload, timeout=30):
            pass


def _status_info(error: grpc.aio.AioRpcError) -> tuple[list[str], dict[str, str]]:
    status = rpc_status.from_call(error)
    assert status is not None, "the error carries a google.rpc.Status"
    fields, metadata = [], {}
    for detail in status.details:
        if detail.Is(error_details_pb2.BadRequest.DESCRIPTOR):
            bad = error_details_pb2.BadRequest()
            detail.Unpack(bad)
            fields += [v.field for v in bad.field_violations]
        if detail.Is(error_details_pb2.ErrorInfo.DESCRIPTOR):
            info = error_details_pb2.ErrorInfo()
            detail.Unpack(info)
            metadata.update(info.metadata)
    return fields, metadata


@pytest.mark.parametrize("kind", sorted(MALFORMED))
@pytest.mark.parametrize("method", sorted(RPCS))
async def test_malformed_bytes_are_invalid_argument(server_address, method, kind):
    async with grpc.aio.insecure_channel(server_address) as channel:
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await _call(channel, method, _payload(method, kind))
    error = caught.value
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT, (kind, error.details())
    assert "class" not in error.details() and "DecodeError" not in error.details()
    assert _status_info(error)[0] == ["request"]


@pytest.mark.parametrize(
    "method",
    [
        "/tierank.v1.RankService/CreateJob",
        "/tierank.v1.RankService/Rank",
        "/tierank.v1.EvalService/Evaluate",
    ],
)
async def test_a_request_over_the_limit_names_the_limit_and_the_flag(server_address, method):
    # The test server's limit is 4 MiB; a 5 MiB string field is well-formed for every request.
    oversize = b"\x0a" + _varint(5 * 1024 * 1024) + b"x" * (5 * 1024 * 1024)
    async with grpc.aio.insecure_channel(server_address) as channel:
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await _call(channel, method, oversize)
        error = caught.value
        assert error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert "--max-message-mb" in error.details() and "TIERANK_MAX_MESSAGE_MB" in error.details()
        assert _status_info(error)[1]["limit_bytes"] == str(4 * 1024 * 1024)
        listed = await channel.unary_unary(
            "/tierank.v1.RankService/ListJobs",
            request_serializer=rank_pb2.ListJobsRequest.SerializeToString,
            response_deserializer=rank_pb2.ListJobsResponse.FromString,
        )(rank_pb2.ListJobsRequest())
        assert list(listed.jobs) == [], "an oversize request stores nothing"


async def test_the_server_still_serves_after_malformed_requests(server_address):
    async with grpc.aio.insecure_channel(server_address) as channel:
        for method in RPCS:
            with pytest.raises(grpc.aio.AioRpcError):
                await _call(channel, method, MALFORMED["garbage"])
        answer = await channel.unary_unary(
            "/tierank.v1.EvalService/Evaluate",
            request_serializer=eval_pb2.EvaluateRequest.SerializeToString,
            response_deserializer=eval_pb2.EvaluateResponse.FromString,
        )(
            eval_pb2.EvaluateRequest(
                runs=[eval_pb2.TextFile(name="r", content="1 Q0 a 1 2.0 x\n")],
                labels=eval_pb2.LabelSource(qrels=eval_pb2.TextFile(content="1 0 a 1\n")),
            )
        )
        assert answer.runs[0].aggregates[0].mean == 1.0


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte, value = value & 0x7F, value >> 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)
