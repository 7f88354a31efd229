"""The Job resource as the API shows it, assembled from storage records and events, and the
scheduler's tiers as the API's."""

from __future__ import annotations

from collections.abc import Sequence

from tierank.scheduler.types import Tier
from tierank.server.names import job_name
from tierank.server.observability.tracing import trace_id_of
from tierank.server.storage.base import EventRow, JobRecord
from tierank.server.wire.common import timestamp
from tierank.v1 import rank_pb2

# Event kinds that carry the job's current tiers, newest wins.
TIER_EVENT_KINDS = ("tiers_updated", "completed")


def tiers_to_proto(tiers: Sequence[Tier]) -> list[rank_pb2.Tier]:
    return [rank_pb2.Tier(rank=t.rank, candidate_ids=t.members, settled=t.settled) for t in tiers]


def job_summary(record: JobRecord) -> rank_pb2.Job:
    """The job without its spec and tiers, as ListJobs returns it."""
    job = rank_pb2.Job(
        name=job_name(record.job_id),
        request_id=record.request_id,
        state=record.state,  # type: ignore[arg-type]
        create_time=timestamp(record.create_time),
        update_time=timestamp(record.update_time),
        completion_reason=record.completion_reason,  # type: ignore[arg-type]
        last_sequence=record.last_sequence,
        query=record.query,
        candidate_count=record.candidate_count,
        trace_id=trace_id_of(record.trace_context),
    )
    if record.error_code:
        job.error.code = record.error_code
        job.error.message = record.error_message
    return job


def fill_spec(target: rank_pb2.JobSpec, record: JobRecord, view: rank_pb2.JobView) -> None:
    """Parse the stored spec into `target` (a job's empty spec field) in a view: BASIC (the
    default) keeps candidate ids but drops their texts and metadata, which make up nearly all
    of a big job and would not fit a 4 MiB response."""
    target.ParseFromString(record.spec)
    if view != rank_pb2.JOB_VIEW_FULL:
        for candidate in target.candidates:
            candidate.ClearField("text")
            candidate.ClearField("metadata")


def job_detail(
    record: JobRecord,
    latest_tiers: EventRow | None,
    view: rank_pb2.JobView = rank_pb2.JOB_VIEW_BASIC,
) -> rank_pb2.Job:
    """The job with its spec (in `view`), current tiers and stats."""
    job = job_summary(record)
    fill_spec(job.spec, record, view)
    if latest_tiers is not None:
        event = rank_pb2.JobEvent.FromString(latest_tiers.payload)
        source = event.completed if event.HasField("completed") else event.tiers_updated
        job.tiers.extend(source.tiers)
        job.stats.CopyFrom(source.stats)
    return job
