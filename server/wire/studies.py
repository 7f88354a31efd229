"""The Study resource as the API shows it, from its stored record."""

from __future__ import annotations

from tierank.server.names import study_name
from tierank.server.observability.tracing import trace_id_of
from tierank.server.storage.base import StudyRecord
from tierank.server.wire.common import timestamp
from tierank.v1 import study_pb2


def study_view(record: StudyRecord) -> study_pb2.Study:
    study = study_pb2.Study(
        name=study_name(record.study_id),
        request_id=record.request_id,
        spec=study_pb2.StudySpec.FromString(record.spec),
        state=record.state,  # type: ignore[arg-type]
        create_time=timestamp(record.create_time),
        update_time=timestamp(record.update_time),
        inputs=study_pb2.StudyInputs.FromString(record.inputs),
        progress=study_pb2.StudyProgress.FromString(record.progress),
        trace_id=trace_id_of(record.trace_context),
    )
    if record.start_time:
        study.start_time.CopyFrom(timestamp(record.start_time))
    if record.end_time:
        study.end_time.CopyFrom(timestamp(record.end_time))
    if record.error_code:
        study.error.code = record.error_code
        study.error.message = record.error_message
    return study
