"""RankService over grpc.aio: thin translation between requests and the job manager."""

from __future__ import annotations

import base64
import binascii
from collections.abc import AsyncIterator, Awaitable, Callable
from functools import wraps
from typing import Any, TypeVar

import grpc
import structlog

from tierank.server.errors import ApiError, FieldViolation, abort, invalid_argument, not_found
from tierank.server.follow import follow_events
from tierank.server.hub import EventHub
from tierank.server.jobs import DEFAULT_TENANT, JobManager
from tierank.server.storage.base import JobRecord, Storage
from tierank.server.views import TIER_EVENT_KINDS, job_detail, job_summary
from tierank.v1 import rank_pb2, rank_pb2_grpc

DEFAULT_PAGE_SIZE = 50
MAX_PAGE_SIZE = 1000

Handler = TypeVar("Handler", bound=Callable[..., Awaitable[Any]])


def rpc_errors(method: Handler) -> Handler:
    """Turn ApiError into a rich status and bind the request's ids to the log."""

    @wraps(method)
    async def wrapper(self: RankServicer, request: Any, context: grpc.aio.ServicerContext) -> Any:
        structlog.contextvars.bind_contextvars(rpc=method.__name__)
        try:
            return await method(self, request, context)
        except ApiError as error:
            await abort(context, error)

    return wrapper  # type: ignore[return-value]


def _parse_name(name: str) -> str:
    prefix = "jobs/"
    if not name.startswith(prefix) or len(name) == len(prefix) or "/" in name[len(prefix) :]:
        raise invalid_argument([FieldViolation("name", "must look like 'jobs/{job_id}'")])
    return name[len(prefix) :]


class RankServicer(rank_pb2_grpc.RankServiceServicer):
    def __init__(self, manager: JobManager, storage: Storage, hub: EventHub) -> None:
        self._manager = manager
        self._storage = storage
        self._hub = hub

    async def _record(self, name: str) -> JobRecord:
        record = await self._storage.get_job(_parse_name(name))
        if record is None:
            raise not_found(name)
        return record

    async def _detail(self, record: JobRecord) -> rank_pb2.Job:
        latest = await self._storage.latest_event(record.job_id, TIER_EVENT_KINDS)
        return job_detail(record, latest)

    @rpc_errors
    async def CreateJob(
        self, request: rank_pb2.CreateJobRequest, context: grpc.aio.ServicerContext
    ) -> rank_pb2.Job:
        record, _ = await self._manager.create(request.spec, request.request_id)
        return await self._detail(record)

    @rpc_errors
    async def GetJob(
        self, request: rank_pb2.GetJobRequest, context: grpc.aio.ServicerContext
    ) -> rank_pb2.Job:
        return await self._detail(await self._record(request.name))

    @rpc_errors
    async def ListJobs(
        self, request: rank_pb2.ListJobsRequest, context: grpc.aio.ServicerContext
    ) -> rank_pb2.ListJobsResponse:
        if request.page_size < 0:
            raise invalid_argument([FieldViolation("page_size", "must not be negative")])
        page_size = min(request.page_size or DEFAULT_PAGE_SIZE, MAX_PAGE_SIZE)
        before = _decode_page_token(request.page_token)
        state = request.state or None
        records = await self._storage.list_jobs(DEFAULT_TENANT, state, page_size + 1, before)
        response = rank_pb2.ListJobsResponse(jobs=[job_summary(r) for r in records[:page_size]])
        if len(records) > page_size:
            response.next_page_token = _encode_page_token(records[page_size - 1].job_id)
        return response

    @rpc_errors
    async def CancelJob(
        self, request: rank_pb2.CancelJobRequest, context: grpc.aio.ServicerContext
    ) -> rank_pb2.Job:
        record = await self._record(request.name)
        await self._manager.cancel(record.job_id)
        return await self._detail(await self._record(request.name))

    @rpc_errors
    async def GetVerdict(
        self, request: rank_pb2.GetVerdictRequest, context: grpc.aio.ServicerContext
    ) -> rank_pb2.VerdictRecord:
        job_name, _, call_id = request.name.partition("/verdicts/")
        if not call_id or "/" in call_id:
            raise invalid_argument(
                [FieldViolation("name", "must look like 'jobs/{job_id}/verdicts/{call_id}'")]
            )
        record = await self._record(job_name)
        audit = await self._storage.read_audit(record.job_id, call_id)
        if audit is None:
            raise not_found(request.name)
        return rank_pb2.VerdictRecord(
            name=request.name,
            verdict=rank_pb2.VerdictReceived.FromString(audit.verdict),
            prompt=audit.prompt,
            raw_answer=audit.raw_answer,
        )

    async def WatchJob(
        self, request: rank_pb2.WatchJobRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[rank_pb2.JobEvent]:
        try:
            record = await self._record(request.name)
            if request.after_sequence < 0:
                raise invalid_argument([FieldViolation("after_sequence", "must not be negative")])
        except ApiError as error:
            await abort(context, error)
            return
        async for event in follow_events(
            self._storage, self._hub, record.job_id, request.after_sequence
        ):
            yield event

    async def Rank(
        self, request: rank_pb2.RankRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[rank_pb2.JobEvent]:
        try:
            record, _ = await self._manager.create(request.spec, request.request_id)
        except ApiError as error:
            await abort(context, error)
            return
        async for event in follow_events(self._storage, self._hub, record.job_id, 0):
            yield event


def _encode_page_token(job_id: str) -> str:
    return base64.urlsafe_b64encode(job_id.encode()).decode()


def _decode_page_token(token: str) -> str | None:
    if not token:
        return None
    try:
        job_id = base64.b64decode(token.encode(), altchars=b"-_", validate=True).decode()
        if not job_id:
            raise ValueError(token)
        return job_id
    except (binascii.Error, UnicodeDecodeError, ValueError):
        raise invalid_argument(
            [FieldViolation("page_token", "is not a token from ListJobs")]
        ) from None
