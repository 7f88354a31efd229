"""The Study resource as the API shows it, from its stored record."""

from __future__ import annotations

import json
from collections.abc import Sequence

from tierank.server.names import study_name
from tierank.server.observability.tracing import trace_id_of
from tierank.server.storage.base import BatchState, ProviderBatchRecord, StudyRecord
from tierank.server.wire.common import timestamp
from tierank.v1 import study_pb2

_BATCH_STATES = {
    BatchState.SUBMITTING: study_pb2.PROVIDER_BATCH_STATE_SUBMITTING,
    BatchState.OPEN: study_pb2.PROVIDER_BATCH_STATE_OPEN,
    BatchState.ENDED: study_pb2.PROVIDER_BATCH_STATE_ENDED,
    BatchState.FAILED: study_pb2.PROVIDER_BATCH_STATE_FAILED,
}


def study_view(
    record: StudyRecord,
    batches: Sequence[ProviderBatchRecord] = (),
    pause: tuple[str, float] | None = None,
) -> study_pb2.Study:
    """The study; `batches`, its provider batches, where the call shows them; `pause`, why it
    cannot go on and since when, where its driver says so."""
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
        provider_batches=[provider_batch_view(batch) for batch in batches],
    )
    if record.start_time:
        study.start_time.CopyFrom(timestamp(record.start_time))
    if record.end_time:
        study.end_time.CopyFrom(timestamp(record.end_time))
    if record.error_code:
        study.error.code = record.error_code
        study.error.message = record.error_message
    if pause is not None and record.state == study_pb2.STUDY_STATE_RUNNING:
        study.pause.reason, since = pause
        study.pause.since.CopyFrom(timestamp(since))
    return study


def provider_batch_view(record: ProviderBatchRecord) -> study_pb2.ProviderBatch:
    batch = study_pb2.ProviderBatch(
        provider=record.provider,
        model=record.model,
        state=_BATCH_STATES[record.state],
        vendor_id=record.vendor_id,
        vendor_status=record.vendor_status,
        calls=record.calls,
        vendor_counts=_vendor_counts(record.counts),
        create_time=timestamp(record.create_time),
        message=record.message,
    )
    if record.submit_time:
        batch.submit_time.CopyFrom(timestamp(record.submit_time))
    if record.end_time:
        batch.end_time.CopyFrom(timestamp(record.end_time))
    return batch


def _vendor_counts(counts: str) -> dict[str, int]:
    """The whole-number counts of the stored JSON object. What a vendor's SDK dumps is kept as
    it came, so a value that is no count (a null, a nested object) is left out, and a record
    that is no JSON object shows none, rather than failing the study's every GetStudy."""
    try:
        parsed = json.loads(counts)
    except ValueError:
        return {}
    if not isinstance(parsed, dict):
        return {}
    return {
        str(name): value
        for name, value in parsed.items()
        if isinstance(value, int) and not isinstance(value, bool)
    }
