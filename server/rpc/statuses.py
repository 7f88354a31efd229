"""The one mapping from the server's errors (server/errors.py) to google.rpc statuses with
details: ErrorInfo on every one, BadRequest field violations for bad input, ResourceInfo for
what is not found, RetryInfo for what can succeed later, QuotaFailure for a tenant's limit.
The interceptor reports every failed call through `status_of`, and an operation's failure is
stored as the status its unary call would have had."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import grpc
import structlog
from google.protobuf import any_pb2, duration_pb2
from google.protobuf.message import Message
from google.rpc import code_pb2, error_details_pb2, status_pb2
from grpc_status import rpc_status

from tierank.server import metrics
from tierank.server.errors import (
    InvalidInput,
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
from tierank.server.rpc.auth import current_caller

DOMAIN = "tierank.dev"
# A full disk is freed by an operator, not in a moment: retrying sooner only adds load.
_STORAGE_FULL_RETRY_S = 30.0
# A database restart or failover takes seconds.
_STORAGE_UNAVAILABLE_RETRY_S = 2.0
_QUOTA_ADVICE = "an admin can change it with `tierank tenants set`"


def status_of(error: Exception, reference: str) -> status_pb2.Status:
    """The status a failure is reported with (by calls, and by operations, whose work
    outlives its call), logged as what it is; `reference` is quoted in an internal error's
    message so that the logs can be searched for it."""
    error = _cause(error)
    log = structlog.get_logger()
    if isinstance(error, QuotaExceeded):
        log.info("quota exceeded", limit=error.limit)
        metrics.REJECTIONS.labels(tenant=current_caller().tenant, limit=error.limit).inc()
    elif isinstance(error, StorageFull):
        log.warning("storage full", error=str(error))
    elif isinstance(error, StorageUnavailable):
        log.warning("storage unavailable", error=str(error))
    elif isinstance(error, StorageDamaged):
        log.error("storage damaged", error=str(error))
    to_status = _mapping(error)
    if to_status is None:
        log.exception("internal error")
        return _status(code_pb2.INTERNAL, f"internal error ({reference})", _info("INTERNAL"))
    return to_status(error)


async def abort(context: grpc.aio.ServicerContext, status: status_pb2.Status) -> None:
    await context.abort_with_status(rpc_status.to_status(status))


def _mapping(error: Exception) -> Callable[[Any], status_pb2.Status] | None:
    """How `error` becomes its status: its kind's entry, else its nearest ancestor's; None for
    an internal error."""
    if isinstance(error, TierankError):
        for kind in type(error).__mro__:
            if kind in _STATUSES:
                return _STATUSES[kind]
    return None


def _cause(error: Exception) -> Exception:
    """The error a task group's exception group stands for: its first one with a status of its
    own, else its first leaf (which then is reported as internal)."""
    if not isinstance(error, ExceptionGroup):
        return error
    leaves = [_cause(e) for e in error.exceptions]
    return ([e for e in leaves if _mapping(e) is not None] or leaves)[0]


def _status(code: int, message: str, *details: Message) -> status_pb2.Status:
    packed = []
    for detail in details:
        any_detail = any_pb2.Any()
        any_detail.Pack(detail)
        packed.append(any_detail)
    return status_pb2.Status(code=code, message=message, details=packed)


def _info(reason: str, **metadata: str) -> error_details_pb2.ErrorInfo:
    return error_details_pb2.ErrorInfo(reason=reason, domain=DOMAIN, metadata=metadata)


def _retry_info(retry_after_s: float) -> error_details_pb2.RetryInfo:
    seconds = int(retry_after_s)
    delay = duration_pb2.Duration(seconds=seconds, nanos=int((retry_after_s - seconds) * 1e9))
    return error_details_pb2.RetryInfo(retry_delay=delay)


def _bad_request(code: int) -> Callable[[InvalidInput], status_pb2.Status]:
    def status(error: InvalidInput) -> status_pb2.Status:
        violations = [
            error_details_pb2.BadRequest.FieldViolation(field=v.field, description=v.rule)
            for v in error.shown
        ]
        return _status(
            code,
            str(error),
            error_details_pb2.BadRequest(field_violations=violations),
            _info(code_pb2.Code.Name(code)),
        )

    return status


def _not_found(error: NotFound) -> status_pb2.Status:
    return _status(
        code_pb2.NOT_FOUND,
        str(error),
        _info("NOT_FOUND", resource=error.resource),
        error_details_pb2.ResourceInfo(
            resource_type=error.resource_type, resource_name=error.resource
        ),
    )


def _unavailable(message: str, retry_after_s: float) -> status_pb2.Status:
    return _status(code_pb2.UNAVAILABLE, message, _info("UNAVAILABLE"), _retry_info(retry_after_s))


def _quota_exceeded(error: QuotaExceeded) -> status_pb2.Status:
    """RESOURCE_EXHAUSTED naming the caller's tenant, its limit and the limit's value
    (QuotaFailure), with when to retry (RetryInfo) for a rate."""
    tenant = current_caller().tenant
    value = f"{error.value:g}"
    violation = error_details_pb2.QuotaFailure.Violation(
        subject=f"tenants/{tenant}", description=f"{error.limit}={value}: {_QUOTA_ADVICE}"
    )
    details: list[Message] = [
        _info("QUOTA_EXCEEDED", limit=error.limit, value=value),
        error_details_pb2.QuotaFailure(violations=[violation]),
    ]
    if error.retry_after_s is not None:
        details.append(_retry_info(error.retry_after_s))
    return _status(
        code_pb2.RESOURCE_EXHAUSTED,
        f"tenant {tenant} is over its {error.limit} quota ({value}): {_QUOTA_ADVICE}",
        *details,
    )


def _explained(code: int) -> Callable[[Any], status_pb2.Status]:
    def status(
        error: ResourceExhausted | PreconditionFailed | PermissionDenied | Unauthenticated,
    ) -> status_pb2.Status:
        return _status(code, str(error), _info(error.reason, **error.metadata))

    return status


# Each kind's status; a kind not here is reported as its nearest ancestor that is. A storage
# failure without a kind of its own (and a lost lease, which only a job's runner meets) is an
# internal error: logged with its traceback, and reported without its text.
_STATUSES: dict[type[TierankError], Callable[[Any], status_pb2.Status] | None] = {
    InvalidInput: _bad_request(code_pb2.INVALID_ARGUMENT),
    OutOfRange: _bad_request(code_pb2.OUT_OF_RANGE),
    NotFound: _not_found,
    Unavailable: lambda error: _unavailable(str(error), error.retry_after_s),
    QuotaExceeded: _quota_exceeded,
    ResourceExhausted: _explained(code_pb2.RESOURCE_EXHAUSTED),
    PreconditionFailed: _explained(code_pb2.FAILED_PRECONDITION),
    PermissionDenied: _explained(code_pb2.PERMISSION_DENIED),
    Unauthenticated: _explained(code_pb2.UNAUTHENTICATED),
    RecordedFailure: lambda error: _status(error.code, str(error)),
    StorageFull: lambda error: _unavailable(
        f"the server's disk is full, so nothing can be stored now ({error}); "
        "reads still work, try again later",
        _STORAGE_FULL_RETRY_S,
    ),
    StorageUnavailable: lambda error: _unavailable(
        f"the server cannot reach its database now ({error}); try again shortly",
        _STORAGE_UNAVAILABLE_RETRY_S,
    ),
    StorageDamaged: lambda error: _status(
        code_pb2.DATA_LOSS, f"stored data could not be read: {error}", _info("DATA_LOSS")
    ),
    StorageError: None,
}
