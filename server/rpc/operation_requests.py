"""Operations over the API: starting QualifyJudge and FillQrels as operations, and
GetOperation, ListOperations, CancelOperation and WatchOperation, each scoped to the caller's
tenant. The operations themselves are run by `jobs.operations`; their state is always read from
storage, so that any replica answers for any operation."""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Protocol

import anyio
from google.protobuf.message import Message
from google.rpc import code_pb2

from tierank.limits import DEFAULT_PAGE_SIZE, MAX_OPERATIONS_PAGE_SIZE
from tierank.resources import FINAL_JOB_STATES
from tierank.server.errors import FieldViolation, InvalidInput, NotFound, RecordedFailure
from tierank.server.jobs.operations import OperationFailed, OperationManager, OperationWork
from tierank.server.jobs.replica import MAX_TICK_S
from tierank.server.names import BadName, operation_name, parse_operation_name
from tierank.server.rpc import page_tokens
from tierank.server.rpc.auth import current_caller
from tierank.server.rpc.statuses import status_of
from tierank.server.rpc.validation import validate_request_id
from tierank.server.storage.base import (
    OperationRecord,
    OperationStore,
    TenantStore,
    WatcherStore,
)
from tierank.server.tenancy.quotas import WatcherSlots, limits_of
from tierank.server.wire.operations import RESULT_TYPES, operation_view
from tierank.v1 import eval_pb2, rank_pb2

# A watcher reads storage again at least this often: changes another replica records reach it
# only that way.
_WATCH_POLL_S = MAX_TICK_S
# How long a unary call whose caller went away waits for its operation to stop.
_CANCEL_WAIT_S = 10.0
# ListOperations' page tokens carry no filter.
_NO_FILTER = 0


@dataclass(frozen=True)
class PreparedWork:
    """A checked long request, ready to run as an operation: `run` returns its result, and
    `progress` can be read while it runs."""

    progress: Callable[[], eval_pb2.OperationProgress]
    run: Callable[[], Awaitable[Message]]


class OperationRequestStore(OperationStore, TenantStore, WatcherStore, Protocol):
    """Operations, and the tenant's limits and watch slots a WatchOperation stream holds."""


class Operations:
    def __init__(self, manager: OperationManager, storage: OperationRequestStore) -> None:
        self._manager = manager
        self._storage = storage
        # A WatchOperation stream is an open watch stream like WatchJob's (max_watchers).
        self._watchers = WatcherSlots(storage, manager.replica_id)

    async def start(
        self,
        method: str,
        request: eval_pb2.QualifyJudgeRequest | eval_pb2.FillQrelsRequest,
        prepare: Callable[[], Awaitable[PreparedWork]],
    ) -> OperationRecord:
        """Check the request (`prepare`), then store and start its operation; a request_id
        used before returns that operation, if it was for the same request."""
        violations = validate_request_id(request.request_id)
        if violations:
            raise InvalidInput(violations)
        digest = hashlib.sha256(request.SerializeToString(deterministic=True)).hexdigest()
        tenant = current_caller().tenant
        # Checked again on a retry with a request_id (it spends nothing), so that the retry of
        # a bad request fails the same way.
        prepared = await prepare()

        async def run() -> bytes:
            try:
                result = await prepared.run()
            except Exception as error:
                status = status_of(error, f"operation of {method}")
                raise OperationFailed(status.code, status.message) from error
            return result.SerializeToString()

        work = OperationWork(method, request.request_id, digest, prepared.progress, run)
        record, created = await self._manager.start(tenant, work)
        if not created and record.request_digest != digest:
            raise InvalidInput(
                [
                    FieldViolation(
                        "request_id",
                        f"was used for {operation_name(record.operation_id)} with a different "
                        "request",
                    )
                ]
            )
        return record

    async def record(self, name: str) -> OperationRecord:
        """The caller's operation by name; another tenant's is not found, exactly like one that
        does not exist."""
        try:
            operation_id = parse_operation_name(name)
        except BadName as bad:
            raise InvalidInput([FieldViolation("name", str(bad))]) from None
        record = await self._storage.get_operation(current_caller().tenant, operation_id)
        if record is None:
            raise NotFound(name, "tierank.v1.Operation")
        return record

    async def get(self, request: eval_pb2.GetOperationRequest) -> eval_pb2.Operation:
        return operation_view(await self.record(request.name))

    async def list(
        self, request: eval_pb2.ListOperationsRequest
    ) -> eval_pb2.ListOperationsResponse:
        if request.page_size < 0:
            raise InvalidInput([FieldViolation("page_size", "must not be negative")])
        page_size = min(request.page_size or DEFAULT_PAGE_SIZE, MAX_OPERATIONS_PAGE_SIZE)
        before = page_tokens.decode(request.page_token, _NO_FILTER)
        records = await self._storage.list_operations(
            current_caller().tenant, page_size + 1, before
        )
        response = eval_pb2.ListOperationsResponse(
            operations=[operation_view(r) for r in records[:page_size]]
        )
        if len(records) > page_size:
            response.next_page_token = page_tokens.encode(
                records[page_size - 1].operation_id, _NO_FILTER
            )
        return response

    async def cancel(self, request: eval_pb2.CancelOperationRequest) -> eval_pb2.Operation:
        record = await self.record(request.name)
        await self._manager.cancel(record)
        return operation_view(await self.record(request.name))

    async def watch(
        self, request: eval_pb2.WatchOperationRequest
    ) -> AsyncIterator[eval_pb2.Operation]:
        record = await self.record(request.name)
        limits = await limits_of(self._storage, record.tenant)
        async with self._watchers.hold(record.tenant, limits):
            async for current in self.follow(record):
                yield operation_view(current)

    async def follow(self, record: OperationRecord) -> AsyncIterator[OperationRecord]:
        """The operation now, then each time it changes, until it has ended."""
        sent: tuple[int, bytes] | None = None
        while True:
            shown = (record.state, record.progress)
            if shown != sent:
                yield record
                sent = shown
            if record.state in FINAL_JOB_STATES:
                return
            await self._manager.wait_for_change(record.operation_id, _WATCH_POLL_S)
            current = await self._storage.get_operation(record.tenant, record.operation_id)
            if current is None:
                return
            record = current

    async def result(self, record: OperationRecord) -> Message:
        """Wait for the operation to end; its result, or its failure raised as the unary RPC
        raised it. A caller that goes away first (a deadline, a disconnect) cancels it."""
        try:
            async for current in self.follow(record):
                record = current
        except BaseException:
            if record.state not in FINAL_JOB_STATES:
                # The caller is gone (its RPC is being cancelled): nobody would read the result.
                with anyio.CancelScope(shield=True), anyio.move_on_after(_CANCEL_WAIT_S):
                    await self._manager.cancel(record)
            raise
        if record.state == rank_pb2.JOB_STATE_SUCCEEDED:
            return RESULT_TYPES[record.method].FromString(record.result)
        if record.state == rank_pb2.JOB_STATE_CANCELLED:
            raise _ended(record, code_pb2.CANCELLED, "the operation was cancelled")
        raise _ended(record, record.error_code, record.error_message)


def _ended(record: OperationRecord, code: int, message: str) -> RecordedFailure:
    return RecordedFailure(code, f"{operation_name(record.operation_id)}: {message}")
