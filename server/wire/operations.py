"""The Operation resource as the API shows it, from its storage record: QualifyJudge and
FillQrels run as operations, each with its result in a field of its own."""

from __future__ import annotations

from google.protobuf.message import Message

from tierank.server.names import operation_name
from tierank.server.storage.base import OperationRecord
from tierank.server.wire.common import timestamp
from tierank.v1 import eval_pb2, rank_pb2

QUALIFY_JUDGE = "QualifyJudge"
FILL_QRELS = "FillQrels"
# The Operation field that holds each method's result, and its type.
_RESULT_FIELDS = {QUALIFY_JUDGE: "qualification", FILL_QRELS: "fill"}
RESULT_TYPES: dict[str, type[Message]] = {
    QUALIFY_JUDGE: eval_pb2.Qualification,
    FILL_QRELS: eval_pb2.FillQrelsResponse,
}


def operation_view(record: OperationRecord) -> eval_pb2.Operation:
    operation = eval_pb2.Operation(
        name=operation_name(record.operation_id),
        request_id=record.request_id,
        method=record.method,
        state=record.state,  # type: ignore[arg-type]  # protoc's stubs refuse an int for an enum
        progress=eval_pb2.OperationProgress.FromString(record.progress),
        create_time=timestamp(record.create_time),
        update_time=timestamp(record.update_time),
    )
    if record.error_code:
        operation.error.CopyFrom(
            rank_pb2.JobError(code=record.error_code, message=record.error_message)
        )
    if record.state == rank_pb2.JOB_STATE_SUCCEEDED and record.result:
        getattr(operation, _RESULT_FIELDS[record.method]).MergeFromString(record.result)
    return operation
