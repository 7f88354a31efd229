"""One exception type for every failed call, with the server's structured details decoded.

The server puts a `google.rpc.Status` in the trailers; callers should never have to parse
trailers themselves, so both clients funnel every `grpc.RpcError` through `error_from_rpc`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import grpc
from google.protobuf import any_pb2
from google.rpc import error_details_pb2
from grpc_status import rpc_status


@dataclass(frozen=True)
class FieldViolation:
    """One rejected field of a request, e.g. `spec.batch_size: must be between 2 and 20`."""

    field: str
    description: str

    def __str__(self) -> str:
        return f"{self.field}: {self.description}"


@dataclass(frozen=True)
class ErrorInfo:
    reason: str
    domain: str
    metadata: dict[str, str] = field(default_factory=dict)


class TierankError(Exception):
    """A call to the tierank service failed.

    `code` is the gRPC status code; `field_violations`, `error_info` and `retry_delay` carry the
    `google.rpc` details the server attached (empty / None when it attached none).
    """

    def __init__(
        self,
        code: grpc.StatusCode,
        message: str,
        *,
        field_violations: tuple[FieldViolation, ...] = (),
        error_info: ErrorInfo | None = None,
        retry_delay: float | None = None,
    ) -> None:
        super().__init__(f"{code.name}: {message}" if message else code.name)
        self.code = code
        self.message = message
        self.field_violations = field_violations
        self.error_info = error_info
        self.retry_delay = retry_delay

    def describe(self) -> str:
        """Human-readable form: the message, then one line per field violation that the
        message does not already state (the server's usually states them all)."""
        lines = [str(self)]
        lines.extend(f"  {v}" for v in self.field_violations if str(v) not in self.message)
        return "\n".join(lines)


# How gRPC core words "there is no server there" (refused, no route, unknown host).
_CONNECT_FAILURES = (
    "failed to connect to all addresses",
    "DNS resolution failed",
    "errors resolving",
)


# How gRPC core words a TLS handshake that failed, and what BoringSSL put before its reason.
_HANDSHAKE_FAILED = "handshake failed"
_SSL_REASON = re.compile(r"OPENSSL_internal:(?P<reason>.+?)(?::\s*OK)?$")
# A plaintext client at a TLS server, or a client without the certificate an mTLS server asks
# for: the server hangs up and gRPC says only this.
_SOCKET_CLOSED = "Socket closed"
# Called once a channel would not connect, to learn why: it fails on the connection, so it
# never reaches a server's handlers (a server that just came up answers it as a health check).
CONNECT_PROBE_METHOD = "/grpc.health.v1.Health/Check"


def cannot_reach(target: str, error: TierankError) -> TierankError:
    """The error for a server never reached: one line naming the address and the cause."""
    cause = _cause(error)
    return TierankError(
        grpc.StatusCode.UNAVAILABLE, f"cannot reach {target}" + (f" ({cause})" if cause else "")
    )


def not_answered(timeout: float, last_failure: TierankError | None) -> TierankError:
    """Why a wait for a server ran out: a server that hung up on every connection (it wants
    TLS, or a client certificate) says more than "no server answered"."""
    if last_failure is not None and _SOCKET_CLOSED in last_failure.message:
        return last_failure
    return TierankError(grpc.StatusCode.UNAVAILABLE, f"no server answered in {timeout:g}s")


def is_connect_failure(error: TierankError) -> bool:
    """The call never reached a server (as opposed to a server that answered UNAVAILABLE)."""
    return error.code == grpc.StatusCode.UNAVAILABLE and any(
        phrase in error.message for phrase in _CONNECT_FAILURES
    )


def is_handshake_failure(error: TierankError) -> bool:
    """TLS could not be agreed (an untrusted certificate, a plaintext server): waiting longer
    cannot mend it."""
    return is_connect_failure(error) and _HANDSHAKE_FAILED in error.message.lower()


def _cause(error: TierankError) -> str:
    if is_handshake_failure(error):
        reason = _SSL_REASON.search(error.message)
        return "TLS handshake failed" + (f": {reason['reason']}" if reason else "")
    cause = error.message.rsplit(": ", 1)[-1].strip(" ]") if error.message else ""
    if cause == _SOCKET_CLOSED and is_connect_failure(error):
        return "the server closed the connection: does it need TLS, or a client certificate?"
    return cause


def error_from_rpc(error: grpc.RpcError, target: str = "") -> TierankError:
    """Decode a failed call (sync `grpc.RpcError` or `grpc.aio.AioRpcError`).

    With the call's `target`, a call that never reached a server becomes `cannot_reach`.
    """
    decoded = _decode(error)
    return cannot_reach(target, decoded) if target and is_connect_failure(decoded) else decoded


def _decode(error: grpc.RpcError) -> TierankError:
    code = error.code() if callable(getattr(error, "code", None)) else grpc.StatusCode.UNKNOWN
    message = error.details() if callable(getattr(error, "details", None)) else str(error)
    violations: list[FieldViolation] = []
    error_info: ErrorInfo | None = None
    retry_delay: float | None = None
    for detail in _status_details(error):
        if detail.Is(error_details_pb2.BadRequest.DESCRIPTOR):
            bad_request = error_details_pb2.BadRequest()
            detail.Unpack(bad_request)
            violations.extend(
                FieldViolation(v.field, v.description) for v in bad_request.field_violations
            )
        elif detail.Is(error_details_pb2.ErrorInfo.DESCRIPTOR):
            info = error_details_pb2.ErrorInfo()
            detail.Unpack(info)
            error_info = ErrorInfo(info.reason, info.domain, dict(info.metadata))
        elif detail.Is(error_details_pb2.RetryInfo.DESCRIPTOR):
            retry = error_details_pb2.RetryInfo()
            detail.Unpack(retry)
            retry_delay = retry.retry_delay.ToTimedelta().total_seconds()
    return TierankError(
        code,
        message or "",
        field_violations=tuple(violations),
        error_info=error_info,
        retry_delay=retry_delay,
    )


def _status_details(error: grpc.RpcError) -> list[any_pb2.Any]:
    if not callable(getattr(error, "trailing_metadata", None)):
        return []
    try:
        # grpc.aio's AioRpcError is no grpc.Call, but has the three methods from_call reads.
        status = rpc_status.from_call(error)  # type: ignore[arg-type]
    except ValueError:
        # Trailers disagree with the status line; trust the status line and drop the details.
        return []
    return list(status.details) if status is not None else []
