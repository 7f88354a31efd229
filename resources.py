"""The API's resources as both sides must see them, declared once: the collections that name
them (AIP-122) and the states in which each has ended. The server builds and parses names and
ends streams with these; the client accepts bare ids and stops watching with them. A root
module, as limits.py, because the client may not import the server."""

from __future__ import annotations

from tierank.v1 import rank_pb2, study_pb2

# Collections: a job is `jobs/{id}`, one of its verdicts `jobs/{id}/verdicts/{call_id}`.
JOB_COLLECTION = "jobs"
VERDICT_COLLECTION = "verdicts"
KEY_COLLECTION = "keys"
TENANT_COLLECTION = "tenants"
QUALIFICATION_COLLECTION = "qualifications"
OPERATION_COLLECTION = "operations"
STUDY_COLLECTION = "studies"

# A job (and an operation, which shares its states) in one of these has ended.
FINAL_JOB_STATES = frozenset(
    {rank_pb2.JOB_STATE_SUCCEEDED, rank_pb2.JOB_STATE_FAILED, rank_pb2.JOB_STATE_CANCELLED}
)
# The events that end a job's stream.
TERMINAL_EVENT_KINDS = frozenset({"completed", "failed"})


def is_terminal_event(event: rank_pb2.JobEvent) -> bool:
    return event.WhichOneof("kind") in TERMINAL_EVENT_KINDS


# Studies: a draft takes inputs, a running one is driven by a replica; the rest are final, and a
# study's watch stream closes after them.
STUDY_DRAFT = study_pb2.STUDY_STATE_DRAFT
STUDY_RUNNING = study_pb2.STUDY_STATE_RUNNING
FINAL_STUDY_STATES = frozenset(
    {
        study_pb2.STUDY_STATE_SUCCEEDED,
        study_pb2.STUDY_STATE_FAILED,
        study_pb2.STUDY_STATE_CANCELLED,
    }
)
