"""Operations (long-running QualifyJudge and FillQrels) on the client side: names, outcomes and
one-line progress, shared by both clients and the CLI."""

from __future__ import annotations

import uuid
from typing import TypeVar

import grpc
from google.protobuf.message import Message

from tierank.client._errors import TierankError
from tierank.client._names import state_name
from tierank.resources import FINAL_JOB_STATES, OPERATION_COLLECTION
from tierank.v1 import eval_pb2, rank_pb2

OPERATION_NAME_PREFIX = f"{OPERATION_COLLECTION}/"
Request = TypeVar("Request", eval_pb2.QualifyJudgeRequest, eval_pb2.FillQrelsRequest)


def operation_name(name_or_id: str) -> str:
    """Accept "operations/abc" or just "abc"."""
    if name_or_id.startswith(OPERATION_NAME_PREFIX):
        return name_or_id
    return OPERATION_NAME_PREFIX + name_or_id


def with_request_id(request: Request) -> Request:
    """The request with a request_id (a new one when it has none), so that a retry after a lost
    connection can never start a second operation."""
    if request.request_id:
        return request
    identified = type(request)()
    identified.CopyFrom(request)
    identified.request_id = uuid.uuid4().hex
    return identified


def is_done(operation: eval_pb2.Operation) -> bool:
    return operation.state in FINAL_JOB_STATES


def operation_result(operation: eval_pb2.Operation) -> Message:
    """The result of a SUCCEEDED operation (a Qualification or a FillQrelsResponse); a failed
    or cancelled one raises TierankError with its status."""
    if operation.state == rank_pb2.JOB_STATE_SUCCEEDED:
        result: Message = getattr(operation, operation.WhichOneof("result") or "")
        return result
    if operation.state == rank_pb2.JOB_STATE_CANCELLED:
        raise TierankError(grpc.StatusCode.CANCELLED, f"{operation.name} was cancelled")
    if operation.state == rank_pb2.JOB_STATE_FAILED:
        code = _STATUS_CODES.get(operation.error.code, grpc.StatusCode.UNKNOWN)
        raise TierankError(code, f"{operation.name}: {operation.error.message}")
    raise TierankError(grpc.StatusCode.FAILED_PRECONDITION, f"{operation.name} has not ended")


_STATUS_CODES = {code.value[0]: code for code in grpc.StatusCode}


def describe_operation(operation: eval_pb2.Operation) -> str:
    """One line: what it does, how far it got, what it spent, and its state."""
    progress = operation.progress
    counts = [f"{progress.failed_calls} failed"] if progress.failed_calls else []
    counts += [f"{progress.cached_calls} cached"] if progress.cached_calls else []
    detail = f" ({', '.join(counts)})" if counts else ""
    state = state_name(operation.state)
    return (
        f"{operation.name} {operation.method}: {progress.done_calls}/{progress.planned_calls} "
        f"calls{detail}, {progress.usage.input_tokens} input tokens, "
        f"${progress.usage.cost_usd:.4f}, {state}"
    )
