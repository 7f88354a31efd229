"""Which job and study states are final: defined once for the managers, the views and storage."""

from __future__ import annotations

from tierank.v1 import rank_pb2, study_pb2

TERMINAL_STATES = frozenset(
    {rank_pb2.JOB_STATE_SUCCEEDED, rank_pb2.JOB_STATE_FAILED, rank_pb2.JOB_STATE_CANCELLED}
)
# Event kinds that end a job's stream.
TERMINAL_EVENT_KINDS = frozenset({"completed", "failed"})


def is_terminal_event(event: rank_pb2.JobEvent) -> bool:
    return event.WhichOneof("kind") in TERMINAL_EVENT_KINDS


# Studies: a draft takes inputs, a running one is driven by a replica; the rest are final.
STUDY_DRAFT = study_pb2.STUDY_STATE_DRAFT
STUDY_RUNNING = study_pb2.STUDY_STATE_RUNNING
FINAL_STUDY_STATES = frozenset(
    {
        study_pb2.STUDY_STATE_SUCCEEDED,
        study_pb2.STUDY_STATE_FAILED,
        study_pb2.STUDY_STATE_CANCELLED,
    }
)
