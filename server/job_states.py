"""Which job states are final: defined once for the job manager, the views and storage."""

from __future__ import annotations

from tierank.v1 import rank_pb2

TERMINAL_STATES = frozenset(
    {rank_pb2.JOB_STATE_SUCCEEDED, rank_pb2.JOB_STATE_FAILED, rank_pb2.JOB_STATE_CANCELLED}
)
# Event kinds that end a job's stream.
TERMINAL_EVENT_KINDS = frozenset({"completed", "failed"})


def is_terminal_event(event: rank_pb2.JobEvent) -> bool:
    return event.WhichOneof("kind") in TERMINAL_EVENT_KINDS
