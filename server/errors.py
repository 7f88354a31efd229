"""google.rpc.Status errors with details, so clients in every language get structured causes."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import grpc
from google.protobuf import any_pb2, duration_pb2
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


def _status(code: int, message: str, *details: object) -> status_pb2.Status:
    packed = []
    for detail in details:
        any_detail = any_pb2.Any()
        any_detail.Pack(detail)
        packed.append(any_detail)
    return status_pb2.Status(code=code, message=message, details=packed)


def _info(reason: str, **metadata: str) -> error_details_pb2.ErrorInfo:
    return error_details_pb2.ErrorInfo(reason=reason, domain=DOMAIN, metadata=metadata)


def invalid_argument(violations: Sequence[FieldViolation]) -> ApiError:
    bad_request = error_details_pb2.BadRequest(
        field_violations=[
            error_details_pb2.BadRequest.FieldViolation(field=v.field, description=v.rule)
            for v in violations
        ]
    )
    summary = "; ".join(f"{v.field}: {v.rule}" for v in violations[:5])
    if len(violations) > 5:
        summary += f"; and {len(violations) - 5} more"
    return ApiError(
        _status(
            code_pb2.INVALID_ARGUMENT,
            f"invalid request: {summary}",
            bad_request,
            _info("INVALID_ARGUMENT"),
        )
    )


def not_found(resource: str) -> ApiError:
    return ApiError(
        _status(
            code_pb2.NOT_FOUND,
            f"{resource} not found",
            _info("NOT_FOUND", resource=resource),
            error_details_pb2.ResourceInfo(resource_type="tierank.v1.Job", resource_name=resource),
        )
    )


def unavailable(message: str, retry_after_s: float) -> ApiError:
    seconds = int(retry_after_s)
    delay = duration_pb2.Duration(seconds=seconds, nanos=int((retry_after_s - seconds) * 1e9))
    return ApiError(
        _status(
            code_pb2.UNAVAILABLE,
            message,
            _info("UNAVAILABLE"),
            error_details_pb2.RetryInfo(retry_delay=delay),
        )
    )


async def abort(context: grpc.aio.ServicerContext, error: ApiError) -> None:
    await context.abort_with_status(rpc_status.to_status(error.status))
