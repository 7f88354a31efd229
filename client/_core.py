"""What `Client` and `AsyncClient` share: their settings and every RPC's request.

As httpx's `BaseClient` under its `Client` and `AsyncClient`: the request each method sends is
built here once, and the two clients only do the I/O (a blocking or an asyncio channel, and the
paging and watch loops each writes once in its own way). `tests/client/test_client_surfaces.py`
holds the two clients to the same public methods.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from tierank.client._names import job_name, job_view, parse_state, study_name, verdict_name
from tierank.client._operations import operation_name
from tierank.client._resume import Attempts, ReconnectHook, ReconnectPolicy
from tierank.resources import FINAL_STUDY_STATES
from tierank.v1 import eval_pb2, rank_pb2, study_pb2


@dataclass(frozen=True)
class ClientSettings:
    """Where the client talks, and how it reconnects a stream that broke."""

    target: str
    reconnect: ReconnectPolicy
    on_reconnect: ReconnectHook | None

    def attempts(self) -> Attempts:
        """The reconnection attempts of one stream (or one watch)."""
        return Attempts(self.target, self.reconnect, self.on_reconnect)


def page_items(page: Any, field: str) -> Iterable[Any]:
    """What a page of a listing holds: a repeated field's items, or a text field as one piece
    (ExportStudyQrels pages its qrels as text)."""
    items = getattr(page, field)
    return (items,) if isinstance(items, str) else items


def study_ended(study: study_pb2.Study) -> bool:
    return study.state in FINAL_STUDY_STATES


def fresh_request_id(request_id: str) -> str:
    """`request_id`, or a new one: a retry of a call that creates something never creates a
    second one."""
    return request_id or uuid.uuid4().hex


# -- jobs -----------------------------------------------------------------------------------


def create_job(spec: rank_pb2.JobSpec, request_id: str, full: bool) -> rank_pb2.CreateJobRequest:
    return rank_pb2.CreateJobRequest(spec=spec, request_id=request_id, view=job_view(full))


def get_job(name: str, full: bool) -> rank_pb2.GetJobRequest:
    return rank_pb2.GetJobRequest(name=job_name(name), view=job_view(full))


def cancel_job(name: str) -> rank_pb2.CancelJobRequest:
    return rank_pb2.CancelJobRequest(name=job_name(name))


def get_verdict(job: str, call_id: str) -> rank_pb2.GetVerdictRequest:
    return rank_pb2.GetVerdictRequest(name=verdict_name(job, call_id))


def list_jobs(state: str | int | None, page_size: int, full: bool) -> rank_pb2.ListJobsRequest:
    return rank_pb2.ListJobsRequest(
        page_size=page_size, state=parse_state(state), view=job_view(full)
    )


def rank(spec: rank_pb2.JobSpec, request_id: str) -> rank_pb2.RankRequest:
    return rank_pb2.RankRequest(spec=spec, request_id=fresh_request_id(request_id))


# -- operations -----------------------------------------------------------------------------


def get_operation(name: str) -> eval_pb2.GetOperationRequest:
    return eval_pb2.GetOperationRequest(name=operation_name(name))


def cancel_operation(name: str) -> eval_pb2.CancelOperationRequest:
    return eval_pb2.CancelOperationRequest(name=operation_name(name))


def list_operations(page_size: int) -> eval_pb2.ListOperationsRequest:
    return eval_pb2.ListOperationsRequest(page_size=page_size)


def watch_operation(name: str) -> eval_pb2.WatchOperationRequest:
    return eval_pb2.WatchOperationRequest(name=operation_name(name))


# -- studies --------------------------------------------------------------------------------


def create_study(
    spec: study_pb2.StudySpec, request_id: str, provider_batch: bool
) -> study_pb2.CreateStudyRequest:
    request = study_pb2.CreateStudyRequest(spec=spec, request_id=fresh_request_id(request_id))
    if provider_batch:
        request.spec.provider_batch = True  # on the request's copy: `spec` stays as it was
    return request


def study_inputs(
    name: str, chunk: study_pb2.AddStudyInputsRequest
) -> study_pb2.AddStudyInputsRequest:
    chunk.study = study_name(name)
    return chunk


def start_study(name: str) -> study_pb2.StartStudyRequest:
    return study_pb2.StartStudyRequest(name=study_name(name))


def extend_study(
    name: str,
    systems: Sequence[str],
    request_id: str,
    budget: rank_pb2.Budget | None,
    deadline_seconds: float,
) -> study_pb2.ExtendStudyRequest:
    return study_pb2.ExtendStudyRequest(
        name=study_name(name),
        systems=systems,
        request_id=fresh_request_id(request_id),
        budget=budget,
        deadline_seconds=deadline_seconds,
    )


def get_study(name: str) -> study_pb2.GetStudyRequest:
    return study_pb2.GetStudyRequest(name=study_name(name))


def list_studies() -> study_pb2.ListStudiesRequest:
    return study_pb2.ListStudiesRequest()


def cancel_study(name: str) -> study_pb2.CancelStudyRequest:
    return study_pb2.CancelStudyRequest(name=study_name(name))


def watch_study(name: str) -> study_pb2.WatchStudyRequest:
    return study_pb2.WatchStudyRequest(name=study_name(name))


def get_study_report(name: str) -> study_pb2.GetStudyReportRequest:
    return study_pb2.GetStudyReportRequest(name=study_name(name))


def calibrate_study(name: str) -> study_pb2.CalibrateStudyRequest:
    return study_pb2.CalibrateStudyRequest(name=study_name(name))


def list_study_queries(name: str) -> study_pb2.ListStudyQueriesRequest:
    return study_pb2.ListStudyQueriesRequest(name=study_name(name))


def export_study_qrels(name: str) -> study_pb2.ExportStudyQrelsRequest:
    return study_pb2.ExportStudyQrelsRequest(name=study_name(name))
