"""API fuzzing: hypothesis-made requests for every RPC of every service, against a server
process on loopback. No answer is ever UNKNOWN or INTERNAL, the server survives, and a rejected
CreateJob or Rank stores nothing.

Requests are drawn from the messages' descriptors (every field of every request, odd unicode,
huge strings, numeric extremes, unknown enum numbers) and from near-valid job specs with the
same noise merged in, plus resource names and page tokens, real and forged. The default run is
short; TIERANK_FUZZ_EXAMPLES scales it (bench/README.md records a bigger run).
"""

from __future__ import annotations

import base64
import os
from collections.abc import Iterator
from functools import partial
from pathlib import Path

import grpc
import pytest
from google.protobuf import message_factory
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.message import Message
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tierank.client import LocalServer
from tierank.v1 import (
    admin_pb2,
    admin_pb2_grpc,
    eval_pb2,
    eval_pb2_grpc,
    rank_pb2,
    rank_pb2_grpc,
)

EXAMPLES = int(os.environ.get("TIERANK_FUZZ_EXAMPLES", "300"))
NEVER = {grpc.StatusCode.UNKNOWN, grpc.StatusCode.INTERNAL}
API_MODULES = (rank_pb2, eval_pb2, admin_pb2)
STUBS = {
    "RankService": rank_pb2_grpc.RankServiceStub,
    "EvalService": eval_pb2_grpc.EvalServiceStub,
    "AdminService": admin_pb2_grpc.AdminServiceStub,
}
_INT32 = (-(2**31), 2**31 - 1)
_INT64 = (-(2**63), 2**63 - 1)

SPECIAL_STRINGS = [
    "",
    " ",
    "\x00",
    "\u202e\u0301\ufeff",
    "💥" * 500,
    "jobs/",
    "jobs/abc",
    "jobs/../../etc/passwd",
    "jobs/" + "a" * 200,
    "jobs/x/verdicts/y",
    "jobs/x/verdicts/",
    base64.urlsafe_b64encode(b"01a20b98c567c5a3fbcafe9b").decode(),
    base64.urlsafe_b64encode(b"01a20b98c567c5a3fbcafe9b:0" + b"\x00" * 16).decode(),
    "%%%",
    "lexical",
    "oracle",
    "openai-compatible",
    "nDCG@10",
    "nDCG@" + "9" * 5000,
    "R@-1",
    "[" * 5000,
    "9" * 5000,
    "inf",
    "nan",
    "1e400",
    "1 0 a 1\n1 0 b 0\n",
    "1 Q0 a 1 2.0 x\n1 Q0 b 2 1.0 x\n",
    '{"id": "a", "text": "t"}\n',
    "1\tquery\n",
]
ODD_TEXT = st.one_of(
    st.text(max_size=20),
    st.sampled_from(SPECIAL_STRINGS),
    st.text(min_size=1, max_size=3).map(lambda s: s * 30_000),
)


def _scalar(field: FieldDescriptor) -> st.SearchStrategy[object]:
    kind = field.type
    if kind == FieldDescriptor.TYPE_STRING:
        return ODD_TEXT
    if kind == FieldDescriptor.TYPE_BOOL:
        return st.booleans()
    if kind == FieldDescriptor.TYPE_DOUBLE:
        return st.floats()
    if kind == FieldDescriptor.TYPE_ENUM:
        known = [v.number for v in field.enum_type.values]
        return st.one_of(st.sampled_from(known), st.integers(*_INT32))
    bounds = _INT64 if kind == FieldDescriptor.TYPE_INT64 else _INT32
    return st.one_of(st.integers(*bounds), st.sampled_from([0, 1, -1, *bounds]))


@st.composite
def noise(draw: st.DrawFn, descriptor: Descriptor, depth: int = 0) -> Message:
    """Any message of this type: each field maybe set, to anything its type allows."""
    message = _message_class(descriptor)()
    for field in descriptor.fields:
        if not draw(st.booleans()):
            continue
        target = getattr(message, field.name)
        if field.message_type is not None and field.message_type.GetOptions().map_entry:
            for key, value in draw(st.dictionaries(ODD_TEXT, ODD_TEXT, max_size=3)).items():
                target[key] = value
        elif field.message_type is not None:
            if depth >= 4:
                continue
            inner = noise(field.message_type, depth + 1)
            if _is_repeated(field):
                for value in draw(st.lists(inner, max_size=3)):
                    target.add().CopyFrom(value)
            else:
                target.CopyFrom(draw(inner))
        elif _is_repeated(field):
            target.extend(draw(st.lists(_scalar(field), max_size=3)))
        else:
            setattr(message, field.name, draw(_scalar(field)))
    return message


def _is_repeated(field: FieldDescriptor) -> bool:
    return field.is_repeated


def _message_class(descriptor: Descriptor) -> type[Message]:
    return message_factory.GetMessageClass(descriptor)


@st.composite
def near_valid_spec(draw: st.DrawFn) -> rank_pb2.JobSpec:
    """A spec that would run, with noise merged in: most fields valid, a few odd."""
    size = draw(st.sampled_from([2, 5, 12, 10_000, 10_001]))
    spec = rank_pb2.JobSpec(
        query="how do solar panels work",
        candidates=[
            rank_pb2.Candidate(
                id=f"c{i}", text="" if size >= 10_000 else f"text {i}", metadata={"score": str(i)}
            )
            for i in range(size)
        ],
        judges=[
            rank_pb2.JudgeSpec(
                provider="oracle", parameters=rank_pb2.JudgeParameters(options={"noise": "0"})
            )
        ],
        budget=rank_pb2.Budget(max_judge_calls=3),
    )
    spec.MergeFrom(draw(noise(rank_pb2.JobSpec.DESCRIPTOR, depth=1)))
    return spec


def _requests() -> list[tuple[str, str, st.SearchStrategy[Message]]]:
    """(service, method, requests) for every RPC of every service."""
    rpcs: list[tuple[str, str, st.SearchStrategy[Message]]] = []
    for module in API_MODULES:
        for service in module.DESCRIPTOR.services_by_name.values():
            for method in service.methods:
                request = noise(method.input_type)
                if method.input_type.fields_by_name.get("spec") is not None:
                    request = st.one_of(
                        request,
                        st.builds(
                            partial(_with_spec, _message_class(method.input_type)),
                            near_valid_spec(),
                            st.integers(*_INT32),
                        ),
                    )
                rpcs.append((service.name, method.name, request))
    return rpcs


def _with_spec(cls: type[Message], spec: rank_pb2.JobSpec, view: int) -> Message:
    request = cls(spec=spec)
    if "view" in cls.DESCRIPTOR.fields_by_name and view % 4:
        request.view = view % 3
    return request


@pytest.fixture(scope="module")
def fuzz_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalServer]:
    db = Path(tmp_path_factory.mktemp("fuzz")) / "fuzz.db"
    server = LocalServer(db=db, extra_args=("--log-level", "error", "--max-message-mb", "4"))
    server.start()
    yield server
    server.stop()


def _stored(channel: grpc.Channel) -> int:
    stub = rank_pb2_grpc.RankServiceStub(channel)
    return len(stub.ListJobs(rank_pb2.ListJobsRequest(page_size=1000), timeout=30).jobs)


def _call(channel: grpc.Channel, service: str, method: str, request: Message) -> grpc.StatusCode:
    stub = STUBS[service](channel)
    try:
        if method in ("WatchJob", "Rank"):
            stream = getattr(stub, method)(request, timeout=10)
            try:
                next(iter(stream), None)  # the first event or the error is enough
            finally:
                stream.cancel()
        else:
            getattr(stub, method)(request, timeout=30)
    except grpc.RpcError as error:
        return error.code()  # type: ignore[attr-defined]
    return grpc.StatusCode.OK


def test_fuzzed_requests_never_get_unknown_or_internal(fuzz_server: LocalServer) -> None:
    tried: dict[str, int] = {}
    options = [("grpc.max_receive_message_length", 64 * 1024 * 1024)]
    rpcs = _requests()
    with grpc.insecure_channel(fuzz_server.address, options=options) as channel:
        # Each RPC gets its share of the examples: drawing RPCs at random could miss one.
        for service, method, requests in rpcs:
            _fuzz(channel, service, method, requests, max(EXAMPLES // len(rpcs), 5), tried)
        assert len(tried) == len(rpcs), f"every RPC was tried: {sorted(tried)}"
        print(f"fuzzed {sum(tried.values())} requests: {tried}")
        assert _stored(channel) >= 0  # the server still answers


def _fuzz(
    channel: grpc.Channel,
    service: str,
    method: str,
    requests: st.SearchStrategy[Message],
    examples: int,
    tried: dict[str, int],
) -> None:
    @settings(
        max_examples=examples,
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(requests)
    def one(request: Message) -> None:
        creates = method in ("CreateJob", "Rank")
        before = _stored(channel) if creates else 0
        code = _call(channel, service, method, request)
        tried[method] = tried.get(method, 0) + 1
        assert code not in NEVER, (method, code, str(request)[:500])
        if creates and code not in (grpc.StatusCode.OK, grpc.StatusCode.CANCELLED):
            assert _stored(channel) == before, f"a rejected {method} stored a job ({code})"

    one()
