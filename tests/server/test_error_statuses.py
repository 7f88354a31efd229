"""Every kind of the server's error tree (server/errors.py) reaches a client as one status: its
code, its message and its details, exactly. One table, checked over real gRPC on loopback
through the server's own edge interceptor, which is the one place errors become statuses."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass

import grpc
import pytest
from google.protobuf import any_pb2, duration_pb2, wrappers_pb2
from google.protobuf.message import Message
from google.rpc import code_pb2, error_details_pb2
from grpc_status import rpc_status

from tierank.server import errors
from tierank.server.errors import (
    FieldViolation,
    InvalidInput,
    LeaseLost,
    NotFound,
    OutOfRange,
    PermissionDenied,
    PreconditionFailed,
    QuotaExceeded,
    RecordedFailure,
    ResourceExhausted,
    StorageDamaged,
    StorageError,
    StorageFull,
    StorageUnavailable,
    TierankError,
    Unauthenticated,
    Unavailable,
)
from tierank.server.jobs.steps import TenantActivity
from tierank.server.rpc.auth import AUTH_NONE, Authenticator
from tierank.server.rpc.interceptor import EdgeInterceptor
from tierank.server.rpc.revocation import StreamCredentials
from tierank.server.storage.sqlite import SqliteStorage

_SERVICE = "tierank.test.Errors"
_METHOD = f"/{_SERVICE}/Raise"
_REQUEST_ID = "test-request"
_QUOTA_ADVICE = "an admin can change it with `tierank tenants set`"
_DOMAIN = "tierank.dev"


def _info(reason: str, **metadata: str) -> error_details_pb2.ErrorInfo:
    return error_details_pb2.ErrorInfo(reason=reason, domain=_DOMAIN, metadata=metadata)


def _retry(seconds: int, nanos: int = 0) -> error_details_pb2.RetryInfo:
    return error_details_pb2.RetryInfo(
        retry_delay=duration_pb2.Duration(seconds=seconds, nanos=nanos)
    )


def _bad_request(*violations: tuple[str, str]) -> error_details_pb2.BadRequest:
    return error_details_pb2.BadRequest(
        field_violations=[
            error_details_pb2.BadRequest.FieldViolation(field=field, description=description)
            for field, description in violations
        ]
    )


def _quota_failure(description: str) -> error_details_pb2.QuotaFailure:
    return error_details_pb2.QuotaFailure(
        violations=[
            error_details_pb2.QuotaFailure.Violation(
                subject="tenants/default", description=description
            )
        ]
    )


@dataclass(frozen=True)
class Case:
    raised: BaseException
    code: grpc.StatusCode
    message: str
    details: tuple[Message, ...]


_INTERNAL = Case(
    RuntimeError("a secret detail"),
    grpc.StatusCode.INTERNAL,
    f"internal error (request id {_REQUEST_ID})",
    (_info("INTERNAL"),),
)

# What a client receives for each kind (the unauthenticated dev server's caller is the tenant
# "default"). Every kind of the tree has at least one row (see the test below the table).
CASES = {
    "invalid input": Case(
        InvalidInput(
            [FieldViolation("spec.k", "must be at least 2"), FieldViolation("spec.query", "x")]
        ),
        grpc.StatusCode.INVALID_ARGUMENT,
        "invalid request: spec.k: must be at least 2; spec.query: x",
        (
            _bad_request(("spec.k", "must be at least 2"), ("spec.query", "x")),
            _info("INVALID_ARGUMENT"),
        ),
    ),
    "invalid input, more violations than are shown": Case(
        InvalidInput([FieldViolation(f"f{i}", "r") for i in range(25)]),
        grpc.StatusCode.INVALID_ARGUMENT,
        "invalid request: f0: r; f1: r; f2: r; and 22 more",
        (
            _bad_request(
                *[(f"f{i}", "r") for i in range(errors.MAX_VIOLATIONS)],
                ("", "and 5 more violations not shown"),
            ),
            _info("INVALID_ARGUMENT"),
        ),
    ),
    "out of range": Case(
        OutOfRange(FieldViolation("page_token", "is past the last page")),
        grpc.StatusCode.OUT_OF_RANGE,
        "out of range: page_token: is past the last page",
        (_bad_request(("page_token", "is past the last page")), _info("OUT_OF_RANGE")),
    ),
    "not found": Case(
        NotFound("tenants/t", "tierank.v1.Tenant", "an operator creates it"),
        grpc.StatusCode.NOT_FOUND,
        "tenants/t not found; an operator creates it",
        (
            _info("NOT_FOUND", resource="tenants/t"),
            error_details_pb2.ResourceInfo(
                resource_type="tierank.v1.Tenant", resource_name="tenants/t"
            ),
        ),
    ),
    "unavailable": Case(
        Unavailable("the server is shutting down", 1.5),
        grpc.StatusCode.UNAVAILABLE,
        "the server is shutting down",
        (_info("UNAVAILABLE"), _retry(1, 500_000_000)),
    ),
    "quota exceeded": Case(
        QuotaExceeded("max_watchers", 3),
        grpc.StatusCode.RESOURCE_EXHAUSTED,
        f"tenant default is over its max_watchers quota (3): {_QUOTA_ADVICE}",
        (
            _info("QUOTA_EXCEEDED", limit="max_watchers", value="3"),
            _quota_failure(f"max_watchers=3: {_QUOTA_ADVICE}"),
        ),
    ),
    "quota exceeded, a rate": Case(
        QuotaExceeded("jobs_per_minute", 5, 12.25),
        grpc.StatusCode.RESOURCE_EXHAUSTED,
        f"tenant default is over its jobs_per_minute quota (5): {_QUOTA_ADVICE}",
        (
            _info("QUOTA_EXCEEDED", limit="jobs_per_minute", value="5"),
            _quota_failure(f"jobs_per_minute=5: {_QUOTA_ADVICE}"),
            _retry(12, 250_000_000),
        ),
    ),
    "resource exhausted": Case(
        ResourceExhausted("too many watchers", "TOO_MANY_WATCHERS", limit="100"),
        grpc.StatusCode.RESOURCE_EXHAUSTED,
        "too many watchers",
        (_info("TOO_MANY_WATCHERS", limit="100"),),
    ),
    "precondition failed": Case(
        PreconditionFailed("judges at chance", "JUDGE_NOT_QUALIFIED"),
        grpc.StatusCode.FAILED_PRECONDITION,
        "judges at chance",
        (_info("JUDGE_NOT_QUALIFIED"),),
    ),
    "permission denied": Case(
        PermissionDenied("needs an admin key", "ADMIN_ONLY"),
        grpc.StatusCode.PERMISSION_DENIED,
        "needs an admin key",
        (_info("ADMIN_ONLY"),),
    ),
    "unauthenticated": Case(
        Unauthenticated("API key keys/k was revoked", "KEY_REVOKED"),
        grpc.StatusCode.UNAUTHENTICATED,
        "API key keys/k was revoked",
        (_info("KEY_REVOKED"),),
    ),
    "recorded failure": Case(
        RecordedFailure(code_pb2.ABORTED, "operations/o: the server stopped"),
        grpc.StatusCode.ABORTED,
        "operations/o: the server stopped",
        (),
    ),
    "storage unavailable": Case(
        StorageUnavailable("connection refused"),
        grpc.StatusCode.UNAVAILABLE,
        "the server cannot reach its database now (connection refused); try again shortly",
        (_info("UNAVAILABLE"), _retry(2)),
    ),
    "storage full": Case(
        StorageFull("database or disk is full"),
        grpc.StatusCode.UNAVAILABLE,
        "the server's disk is full, so nothing can be stored now (database or disk is full); "
        "reads still work, try again later",
        (_info("UNAVAILABLE"), _retry(30)),
    ),
    "storage damaged": Case(
        StorageDamaged("a page is damaged"),
        grpc.StatusCode.DATA_LOSS,
        "stored data could not be read: a page is damaged",
        (_info("DATA_LOSS"),),
    ),
    # A storage failure without a kind of its own, and a lost lease, are the server's problem:
    # reported as internal, without their text.
    "storage error": Case(
        StorageError("the database failed: x"),
        _INTERNAL.code,
        _INTERNAL.message,
        _INTERNAL.details,
    ),
    "lease lost": Case(
        LeaseLost("job j is run by another replica now"),
        _INTERNAL.code,
        _INTERNAL.message,
        _INTERNAL.details,
    ),
    "any other exception": _INTERNAL,
    # A task group's failure is reported as its first error that has a status of its own.
    "exception group": Case(
        ExceptionGroup("tasks", [RuntimeError("first"), NotFound("jobs/j")]),
        grpc.StatusCode.NOT_FOUND,
        "jobs/j not found",
        (
            _info("NOT_FOUND", resource="jobs/j"),
            error_details_pb2.ResourceInfo(resource_type="tierank.v1.Job", resource_name="jobs/j"),
        ),
    ),
}


def _kinds(root: type[TierankError]) -> Iterator[type[TierankError]]:
    for kind in root.__subclasses__():
        if not kind.__name__.startswith("_"):  # a shared base, never raised itself
            yield kind
        yield from _kinds(kind)


def test_every_kind_of_the_tree_has_a_row():
    rows = {type(case.raised) for case in CASES.values()}
    missing = [kind.__name__ for kind in _kinds(TierankError) if kind not in rows]
    assert not missing, f"kinds without a row in CASES: {missing}"


@pytest.fixture
async def address(tmp_path) -> AsyncIterator[str]:
    """A gRPC server whose one method raises the case its request names, behind the edge
    interceptor the real server uses (dev mode: no keys, the tenant "default")."""
    storage = SqliteStorage(tmp_path / "t.db", synchronous="NORMAL")

    async def raise_case(request: wrappers_pb2.StringValue, context: object) -> None:
        raise CASES[request.value].raised

    handler = grpc.method_handlers_generic_handler(
        _SERVICE,
        {
            "Raise": grpc.unary_unary_rpc_method_handler(
                raise_case,
                request_deserializer=wrappers_pb2.StringValue.FromString,
                response_serializer=wrappers_pb2.StringValue.SerializeToString,
            )
        },
    )
    interceptor = EdgeInterceptor(
        1 << 20,
        (_SERVICE,),
        Authenticator(storage, AUTH_NONE),
        StreamCredentials(storage),
        TenantActivity(),
    )
    server = grpc.aio.server(interceptors=[interceptor])
    server.add_generic_rpc_handlers([handler])
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        yield f"127.0.0.1:{port}"
    finally:
        await server.stop(None)
        await storage.close()


@pytest.mark.parametrize("name", CASES)
async def test_each_error_reaches_the_client_as_its_status(address: str, name: str):
    case = CASES[name]
    async with grpc.aio.insecure_channel(address) as channel:
        call = channel.unary_unary(
            _METHOD,
            request_serializer=wrappers_pb2.StringValue.SerializeToString,
            response_deserializer=wrappers_pb2.StringValue.FromString,
        )
        with pytest.raises(grpc.aio.AioRpcError) as raised:
            await call(
                wrappers_pb2.StringValue(value=name), metadata=(("x-request-id", _REQUEST_ID),)
            )
    error = raised.value
    assert (error.code(), error.details()) == (case.code, case.message)
    status = rpc_status.from_call(error)
    assert status is not None
    assert [_unpacked(packed) for packed in status.details] == list(case.details)


_DETAIL_TYPES = (
    error_details_pb2.ErrorInfo,
    error_details_pb2.BadRequest,
    error_details_pb2.ResourceInfo,
    error_details_pb2.RetryInfo,
    error_details_pb2.QuotaFailure,
)


def _unpacked(packed: any_pb2.Any) -> Message:
    """A status detail as its own message (the Any itself when it is of no known type)."""
    for detail_type in _DETAIL_TYPES:
        if packed.Is(detail_type.DESCRIPTOR):
            detail = detail_type()
            packed.Unpack(detail)
            return detail
    return packed
