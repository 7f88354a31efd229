"""google.rpc.Status errors with details, so clients in every language get structured causes."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import grpc
from google.protobuf import any_pb2, duration_pb2
from google.protobuf.message import Message
from google.rpc import code_pb2, error_details_pb2, status_pb2
from grpc_status import rpc_status

DOMAIN = "tierank.dev"


@dataclass(frozen=True)
class FieldViolation:
    field: str
    rule: str


class ApiError(Exception):
    """Raised anywhere below the servicer; the servicer turns it into a rich status."""

    def __init__(self, status: status_pb2.Status) -> None:
        super().__init__(status.message)
        self.status = status

    @property
    def code(self) -> grpc.StatusCode:
        return _GRPC_CODES[self.status.code]


_GRPC_CODES = {c.value[0]: c for c in grpc.StatusCode}


def _status(code: int, message: str, *details: Message) -> status_pb2.Status:
    packed = []
    for detail in details:
        any_detail = any_pb2.Any()
        any_detail.Pack(detail)
        packed.append(any_detail)
    return status_pb2.Status(code=code, message=message, details=packed)


def _info(reason: str, **metadata: str) -> error_details_pb2.ErrorInfo:
    return error_details_pb2.ErrorInfo(reason=reason, domain=DOMAIN, metadata=metadata)


# Status details travel in one HTTP/2 trailer; clients drop trailers over 8-16 KiB and then
# see "Stream removed" instead of the error. These caps keep a whole status under ~5 KiB, however
# many rules a request breaks and however long the values it echoes.
MAX_VIOLATIONS = 20
_VIOLATIONS_BUDGET_BYTES = 2500
_FIELD_BYTES = 120
_RULE_BYTES = 200
_MESSAGE_BYTES = 400
_SHOWN_CHARS = 80


# Error texts a job keeps (a verdict's failure reason, a judge's last error, a job's error):
# kept short so that what a job can grow to stays bounded (see validation).
MAX_ERROR_TEXT_BYTES = 1024


def clip(text: str, limit_bytes: int) -> str:
    """`text` cut to at most `limit_bytes` of UTF-8 (on a character boundary), marked '…'."""
    encoded = text.encode()
    if len(encoded) <= limit_bytes:
        return text
    return encoded[: limit_bytes - 3].decode(errors="ignore") + "…"


def shown(value: object) -> str:
    """A client's value quoted for an error message, cut so a huge value cannot bloat it."""
    text = repr(value)
    return text if len(text) <= _SHOWN_CHARS else text[: _SHOWN_CHARS - 1] + "…"


def invalid_argument(violations: Sequence[FieldViolation]) -> ApiError:
    return _bad_request(code_pb2.INVALID_ARGUMENT, "invalid request", violations)


def out_of_range(violation: FieldViolation) -> ApiError:
    return _bad_request(code_pb2.OUT_OF_RANGE, "out of range", [violation])


def _bad_request(code: int, headline: str, violations: Sequence[FieldViolation]) -> ApiError:
    shown_violations: list[error_details_pb2.BadRequest.FieldViolation] = []
    used = 0
    for v in violations[:MAX_VIOLATIONS]:
        field = clip(v.field, _FIELD_BYTES)
        rule = clip(v.rule, _RULE_BYTES)
        used += len(field.encode()) + len(rule.encode())
        if used > _VIOLATIONS_BUDGET_BYTES:
            break
        shown_violations.append(
            error_details_pb2.BadRequest.FieldViolation(field=field, description=rule)
        )
    left_out = len(violations) - len(shown_violations)
    if left_out:
        shown_violations.append(
            error_details_pb2.BadRequest.FieldViolation(
                field="", description=f"and {left_out} more violations not shown"
            )
        )
    summary = "; ".join(f"{v.field}: {v.description}" for v in shown_violations[:3])
    if len(violations) > 3:
        summary += f"; and {len(violations) - 3} more"
    return ApiError(
        _status(
            code,
            clip(f"{headline}: {summary}", _MESSAGE_BYTES),
            error_details_pb2.BadRequest(field_violations=shown_violations),
            _info(code_pb2.Code.Name(code)),
        )
    )


def not_found(resource: str, resource_type: str = "tierank.v1.Job", advice: str = "") -> ApiError:
    resource = clip(resource, _FIELD_BYTES)
    return ApiError(
        _status(
            code_pb2.NOT_FOUND,
            f"{resource} not found" + (f"; {advice}" if advice else ""),
            _info("NOT_FOUND", resource=resource),
            error_details_pb2.ResourceInfo(resource_type=resource_type, resource_name=resource),
        )
    )


def _retry_info(retry_after_s: float) -> error_details_pb2.RetryInfo:
    seconds = int(retry_after_s)
    delay = duration_pb2.Duration(seconds=seconds, nanos=int((retry_after_s - seconds) * 1e9))
    return error_details_pb2.RetryInfo(retry_delay=delay)


def unavailable(message: str, retry_after_s: float) -> ApiError:
    return ApiError(
        _status(code_pb2.UNAVAILABLE, message, _info("UNAVAILABLE"), _retry_info(retry_after_s))
    )


def unauthenticated(message: str, reason: str) -> ApiError:
    return ApiError(_status(code_pb2.UNAUTHENTICATED, message, _info(reason)))


def permission_denied(message: str, reason: str) -> ApiError:
    return ApiError(_status(code_pb2.PERMISSION_DENIED, message, _info(reason)))


def failed_precondition(message: str, reason: str) -> ApiError:
    return ApiError(_status(code_pb2.FAILED_PRECONDITION, message, _info(reason)))


def quota_exceeded(
    tenant: str, limit: str, value: float, message: str, retry_after_s: float | None = None
) -> ApiError:
    """RESOURCE_EXHAUSTED naming the tenant's limit and its value (QuotaFailure), with when to
    retry (RetryInfo) for a rate."""
    violation = error_details_pb2.QuotaFailure.Violation(
        subject=f"tenants/{tenant}", description=f"{limit}={value:g}: {message}"
    )
    details: list[Message] = [
        _info("QUOTA_EXCEEDED", limit=limit, value=f"{value:g}"),
        error_details_pb2.QuotaFailure(violations=[violation]),
    ]
    if retry_after_s is not None:
        details.append(_retry_info(retry_after_s))
    return ApiError(
        _status(
            code_pb2.RESOURCE_EXHAUSTED,
            f"tenant {tenant} is over its {limit} quota ({value:g}): {message}",
            *details,
        )
    )


def resource_exhausted(message: str, reason: str, **metadata: str) -> ApiError:
    return ApiError(_status(code_pb2.RESOURCE_EXHAUSTED, message, _info(reason, **metadata)))


def internal(message: str) -> ApiError:
    return ApiError(_status(code_pb2.INTERNAL, message, _info("INTERNAL")))


def data_loss(message: str) -> ApiError:
    return ApiError(_status(code_pb2.DATA_LOSS, message, _info("DATA_LOSS")))


async def abort(context: grpc.aio.ServicerContext, error: ApiError) -> None:
    await context.abort_with_status(rpc_status.to_status(error.status))
