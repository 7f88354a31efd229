"""RankService over grpc.aio: thin translation between requests and the job manager.

Request parsing, error statuses and log context are the interceptor's (server/rpc/interceptor.py):
methods here raise the server's errors (server/errors.py) and never abort a call themselves.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Protocol

import grpc

from tierank.limits import DEFAULT_PAGE_SIZE, MAX_JOBS_PAGE_SIZE
from tierank.server.errors import FieldViolation, InvalidInput, NotFound, OutOfRange
from tierank.server.jobs.follow import follow_events
from tierank.server.jobs.hub import EventHub
from tierank.server.jobs.manager import JobManager
from tierank.server.names import BadName, parse_job_name, parse_verdict_name
from tierank.server.rpc import page_tokens
from tierank.server.rpc.auth import current_caller
from tierank.server.rpc.validation import (
    resolve_preset,
    validate_request_id,
    validate_size,
    validate_spec,
)
from tierank.server.storage.base import JobReader, JobRecord, TenantStore, WatcherStore
from tierank.server.tenancy.quotas import WatcherSlots, check_candidates, limits_of
from tierank.server.wire.jobs import TIER_EVENT_KINDS, fill_spec, job_detail, job_summary
from tierank.v1 import rank_pb2, rank_pb2_grpc

# A BASIC page stays within gRPC's default 4 MiB receive limit, whatever page_size asks for;
# a page that reaches this size ends early and its next_page_token goes on from there.
_BASIC_PAGE_BYTES = 3 * 1024 * 1024
_PAGE_MARGIN_BYTES = 64 * 1024
_JOB_VIEWS = frozenset(rank_pb2.JobView.values())
_JOB_STATES = frozenset(rank_pb2.JobState.values())


def _parse_name(name: str) -> str:
    try:
        return parse_job_name(name)
    except BadName as bad:
        raise InvalidInput([FieldViolation("name", str(bad))]) from None


def _check_view(view: int) -> rank_pb2.JobView:
    if view not in _JOB_VIEWS:
        raise InvalidInput([FieldViolation("view", f"unknown value {view}")])
    return view  # type: ignore[return-value]


class RankStore(JobReader, TenantStore, WatcherStore, Protocol):
    """What RankService reads of storage: the tenant's jobs, its limits, its open watchers (jobs
    are created and cancelled through the manager)."""


class RankServicer(rank_pb2_grpc.RankServiceServicer):
    def __init__(
        self,
        manager: JobManager,
        storage: RankStore,
        hub: EventHub,
        *,
        replica: str,
        max_message_bytes: int,
    ) -> None:
        self._manager = manager
        self._storage = storage
        self._hub = hub
        self._max_message_bytes = max_message_bytes
        self._watchers = WatcherSlots(storage, replica)

    async def _record(self, name: str) -> JobRecord:
        """The caller's job by name; another tenant's job is not found, exactly like a job that
        does not exist, so that its existence does not leak."""
        record = await self._storage.get_job(current_caller().tenant, _parse_name(name))
        if record is None:
            raise NotFound(name)
        return record

    async def _detail(self, record: JobRecord, view: rank_pb2.JobView) -> rank_pb2.Job:
        latest = await self._storage.latest_event(record.tenant, record.job_id, TIER_EVENT_KINDS)
        return job_detail(record, latest, view)

    async def _create(self, spec: rank_pb2.JobSpec, request_id: str) -> JobRecord:
        # A job too big to answer about is never created: its size is a rule like the others.
        # A preset is resolved first, so that the rules measure the rubric the job will hold.
        violations = (
            resolve_preset(spec)
            + validate_spec(spec, self._manager.knows_provider)
            + validate_size(spec, self._max_message_bytes)
        )
        violations += validate_request_id(request_id)
        if violations:
            raise InvalidInput(violations)
        tenant = current_caller().tenant
        limits = await limits_of(self._storage, tenant)
        check_candidates(limits, len(spec.candidates))
        record, _ = await self._manager.create(spec, request_id, tenant, limits)
        return record

    async def _follow(self, record: JobRecord, after: int) -> AsyncIterator[rank_pb2.JobEvent]:
        limits = await limits_of(self._storage, record.tenant)
        async with self._watchers.hold(record.tenant, limits):
            async for event in follow_events(
                self._storage, self._hub, record.tenant, record.job_id, after
            ):
                yield event

    async def CreateJob(
        self, request: rank_pb2.CreateJobRequest, context: grpc.aio.ServicerContext
    ) -> rank_pb2.Job:
        view = _check_view(request.view)
        return await self._detail(await self._create(request.spec, request.request_id), view)

    async def GetJob(
        self, request: rank_pb2.GetJobRequest, context: grpc.aio.ServicerContext
    ) -> rank_pb2.Job:
        view = _check_view(request.view)
        return await self._detail(await self._record(request.name), view)

    async def ListJobs(
        self, request: rank_pb2.ListJobsRequest, context: grpc.aio.ServicerContext
    ) -> rank_pb2.ListJobsResponse:
        view = _check_view(request.view)
        if request.page_size < 0:
            raise InvalidInput([FieldViolation("page_size", "must not be negative")])
        if request.state not in _JOB_STATES:
            raise InvalidInput([FieldViolation("state", f"unknown value {request.state}")])
        page_size = min(request.page_size or DEFAULT_PAGE_SIZE, MAX_JOBS_PAGE_SIZE)
        before = page_tokens.decode(request.page_token, request.state)
        records = await self._storage.list_jobs(
            current_caller().tenant, request.state or None, page_size + 1, before
        )
        budget = (
            self._max_message_bytes - _PAGE_MARGIN_BYTES
            if view == rank_pb2.JOB_VIEW_FULL
            else min(_BASIC_PAGE_BYTES, self._max_message_bytes - _PAGE_MARGIN_BYTES)
        )
        response = rank_pb2.ListJobsResponse()
        used = 0
        for record in records[:page_size]:
            job = job_summary(record)
            if view == rank_pb2.JOB_VIEW_FULL:
                fill_spec(job.spec, record, view)
            used += job.ByteSize() + 8
            if response.jobs and used > budget:
                break
            response.jobs.append(job)
        if len(response.jobs) < len(records):
            last = records[len(response.jobs) - 1]  # the page is a prefix of the records
            response.next_page_token = page_tokens.encode(last.job_id, request.state)
        return response

    async def CancelJob(
        self, request: rank_pb2.CancelJobRequest, context: grpc.aio.ServicerContext
    ) -> rank_pb2.Job:
        record = await self._record(request.name)
        await self._manager.cancel(record)
        return await self._detail(await self._record(request.name), rank_pb2.JOB_VIEW_BASIC)

    async def GetVerdict(
        self, request: rank_pb2.GetVerdictRequest, context: grpc.aio.ServicerContext
    ) -> rank_pb2.VerdictRecord:
        try:
            job_id, call_id = parse_verdict_name(request.name)
        except BadName as bad:
            raise InvalidInput([FieldViolation("name", str(bad))]) from None
        audit = await self._storage.read_audit(current_caller().tenant, job_id, call_id)
        if audit is None:
            raise NotFound(request.name)
        return rank_pb2.VerdictRecord(
            name=request.name,
            verdict=rank_pb2.VerdictReceived.FromString(audit.verdict),
            prompt=audit.prompt,
            raw_answer=audit.raw_answer,
        )

    async def WatchJob(
        self, request: rank_pb2.WatchJobRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[rank_pb2.JobEvent]:
        record = await self._record(request.name)
        if request.after_sequence < 0:
            raise InvalidInput([FieldViolation("after_sequence", "must not be negative")])
        # Sequences only grow, so nobody can have seen one past the job's last: waiting for it
        # would wait forever (the terminal event may come before it).
        if request.after_sequence > record.last_sequence:
            raise OutOfRange(
                FieldViolation(
                    "after_sequence",
                    f"is past the job's last event ({record.last_sequence})",
                )
            )
        async for event in self._follow(record, request.after_sequence):
            yield event

    async def Rank(
        self, request: rank_pb2.RankRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[rank_pb2.JobEvent]:
        record = await self._create(request.spec, request.request_id)
        async for event in self._follow(record, 0):
            yield event
