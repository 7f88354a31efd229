"""Long-running requests (QualifyJudge, FillQrels) as operations: stored, run as tasks of one
task group the manager owns, their progress written to storage as it changes, cancellable from
any replica, and ended as ABORTED when the server that ran them stops.

Why an unfinished operation is ended rather than resumed after a restart: its request (files of
megabytes) is not stored, and a qualification's listwise calls bypass the verdict cache on
purpose, so resuming would pay for them again; starting again costs the same, and a new
FillQrels pays only for the grades not received yet (they are cached).
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from types import TracebackType
from typing import Protocol

import anyio
import structlog
from anyio.abc import TaskGroup
from google.rpc import code_pb2

from tierank.server.errors import StorageError, Unavailable
from tierank.server.jobs.replica import Replica
from tierank.server.names import new_sortable_id
from tierank.server.storage.base import OperationRecord, OperationStore, Replicated
from tierank.v1 import eval_pb2, rank_pb2

# Progress is written at most this often (and watchers woken), so that a fast stream of calls
# costs a bounded number of writes.
PROGRESS_INTERVAL_S = 0.5
# What a client is told when the server running its operation stopped before the end.
SERVER_STOPPED = (
    "the server running this operation stopped before it finished; start it again "
    "(pointwise grades already received are cached and not paid for again)"
)
SHUTTING_DOWN = "the server is shutting down; start the operation on another server"
_SHUTTING_DOWN_RETRY_AFTER_S = 1.0
# A write on the way out waits no longer than this for an unreachable database: the next
# server's sweep ends the operation instead.
_LAST_WRITE_S = 2.0


class OperationFailed(Exception):
    """How an operation's work failed, as the google.rpc code and message it ends with (the
    API edge's mapping, so that an operation fails with the status the unary call had)."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


@dataclass(frozen=True)
class OperationWork:
    """What an operation does: `run` returns the serialized result message or raises
    OperationFailed; `progress` can be read at any time while it runs."""

    method: str
    request_id: str
    request_digest: str
    progress: Callable[[], eval_pb2.OperationProgress]
    run: Callable[[], Awaitable[bytes]]


@dataclass
class _Running:
    work: OperationWork
    scope: anyio.CancelScope = field(default_factory=anyio.CancelScope)
    finished: anyio.Event = field(default_factory=anyio.Event)

    def cancel(self) -> None:
        self.scope.cancel()


@dataclass
class _Creation:
    done: anyio.Event = field(default_factory=anyio.Event)
    stored: OperationRecord | None = None
    error: Exception | None = None


class ReplicatedOperations(OperationStore, Replicated, Protocol):
    """Operations, and whether other replicas share them (then progress is written as it goes,
    and orphans are swept again and again)."""


class OperationManager:
    """Starts, runs, cancels and sweeps operations."""

    def __init__(self, storage: ReplicatedOperations, replica: Replica) -> None:
        self._storage = storage
        self._replica = replica
        self._running: dict[str, _Running] = {}
        self._changed: dict[str, anyio.Event] = {}
        self._tasks: TaskGroup | None = None
        self._draining = False
        self._log = structlog.get_logger().bind(replica=replica.replica_id)

    async def __aenter__(self) -> OperationManager:
        self._tasks = anyio.create_task_group()
        await self._tasks.__aenter__()
        self._tasks.start_soon(self._keep_sweeping, name="orphaned operations")
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool | None:
        assert self._tasks is not None
        self._tasks.cancel_scope.cancel()
        return await self._tasks.__aexit__(exc_type, exc, tb)

    @property
    def replica_id(self) -> str:
        return self._replica.replica_id

    async def drain(self, grace_s: float) -> None:
        """Refuse new operations and give the running ones `grace_s` to finish; the rest end
        as ABORTED when the manager closes."""
        self._draining = True
        with anyio.move_on_after(grace_s):
            for running in list(self._running.values()):
                await running.finished.wait()

    async def _keep_sweeping(self) -> None:
        """End the operations of servers that stopped: once at start (where one process owns
        the database, that is all of them), then every lease period where replicas share it
        (a replica that dies is no longer live once its heartbeat lapses)."""
        while True:
            try:
                ended = await self._storage.end_orphaned_operations(
                    self._replica.replica_id,
                    rank_pb2.JOB_STATE_FAILED,
                    code_pb2.ABORTED,
                    SERVER_STOPPED,
                )
            except StorageError as error:
                self._log.warning("cannot end orphaned operations", error=str(error))
            else:
                if ended:
                    self._log.info("ended operations whose server stopped", count=ended)
            if not self._storage.shared:
                return
            await anyio.sleep(self._replica.lease_s)

    async def start(self, tenant: str, work: OperationWork) -> tuple[OperationRecord, bool]:
        """Store an operation and start running it here; returns (operation, created). With a
        request_id the tenant used before, nothing starts and the earlier operation comes back
        (the caller compares its digest with the request's)."""
        if self._draining:
            raise Unavailable(SHUTTING_DOWN, _SHUTTING_DOWN_RETRY_AFTER_S)
        now = time.time()
        record = OperationRecord(
            operation_id=new_sortable_id(),
            tenant=tenant,
            request_id=work.request_id,
            request_digest=work.request_digest,
            method=work.method,
            state=rank_pb2.JOB_STATE_RUNNING,
            owner=self._replica.replica_id,
            create_time=now,
            update_time=now,
            progress=work.progress().SerializeToString(),
        )
        # One task the manager owns stores the operation and runs it; the RPC only waits for
        # the store. A client that gives up meanwhile cancels the RPC, never the operation: a
        # stored operation always runs (or is ended), and one that runs is always stored.
        creation = _Creation()
        assert self._tasks is not None
        self._tasks.start_soon(self._store_and_run, record, work, creation, name=work.method)
        await creation.done.wait()
        if creation.error is not None:
            raise creation.error
        if creation.stored is None:  # the server stopped while storing it
            raise Unavailable(SHUTTING_DOWN, _SHUTTING_DOWN_RETRY_AFTER_S)
        return creation.stored, creation.stored.operation_id == record.operation_id

    async def _store_and_run(
        self, record: OperationRecord, work: OperationWork, creation: _Creation
    ) -> None:
        running = _Running(work)
        self._running[record.operation_id] = running
        try:
            try:
                creation.stored = await self._storage.create_operation(record)
            except Exception as error:  # e.g. a full disk: the RPC reports it
                creation.error = error
            finally:
                creation.done.set()
            if creation.stored is not None and creation.stored.operation_id == record.operation_id:
                await self._run(record, running)
        finally:
            del self._running[record.operation_id]
            running.finished.set()
            self._wake(record.operation_id)

    async def _run(self, record: OperationRecord, running: _Running) -> None:
        operation_id = record.operation_id
        log = self._log.bind(operation=operation_id, method=running.work.method)
        state, result, code, message = rank_pb2.JOB_STATE_FAILED, b"", 0, ""
        try:
            with running.scope:
                async with anyio.create_task_group() as reporting:
                    reporting.start_soon(self._report_progress, operation_id, running)
                    try:
                        result = await running.work.run()
                        state = rank_pb2.JOB_STATE_SUCCEEDED
                    except OperationFailed as failed:
                        code, message = failed.code, failed.message
                        log.info("operation failed", code=code, error=message)
                    except Exception:
                        log.exception("operation failed")
                        code, message = code_pb2.INTERNAL, "internal error"
                    reporting.cancel_scope.cancel()
            # A cancel that comes as the work ends leaves the result it reached.
            if running.scope.cancelled_caught and state != rank_pb2.JOB_STATE_SUCCEEDED:
                state, code, message = rank_pb2.JOB_STATE_CANCELLED, 0, ""
        except anyio.get_cancelled_exc_class():
            # The server stops: the operation ends here rather than waiting for the sweep.
            code, message = code_pb2.ABORTED, SERVER_STOPPED
            raise
        finally:
            with anyio.CancelScope(shield=True), anyio.move_on_after(_LAST_WRITE_S):
                try:
                    await self._storage.finish_operation(
                        operation_id,
                        record.owner,
                        state,
                        running.work.progress().SerializeToString(),
                        result,
                        code,
                        message,
                    )
                except StorageError as error:  # the next sweep ends it
                    log.warning("could not record the end of an operation", error=str(error))
            log.info("operation ended", state=rank_pb2.JobState.Name(state))

    async def _report_progress(self, operation_id: str, running: _Running) -> None:
        """Write the progress when it changed (and, where replicas share the database, every
        tick anyway: the write is how a cancel asked for on another replica arrives here)."""
        written = running.work.progress().SerializeToString()
        last_write = time.monotonic()
        while True:
            await anyio.sleep(PROGRESS_INTERVAL_S)
            progress = running.work.progress().SerializeToString()
            due = self._storage.shared and time.monotonic() - last_write >= self._replica.tick_s
            if progress == written and not due:
                continue
            try:
                cancel_requested = await self._storage.update_operation(
                    operation_id, self._replica.replica_id, progress
                )
            except StorageError as error:
                self._log.warning(
                    "cannot record progress", operation=operation_id, error=str(error)
                )
                continue
            written, last_write = progress, time.monotonic()
            self._wake(operation_id)
            if cancel_requested:
                running.cancel()

    def _wake(self, operation_id: str) -> None:
        changed = self._changed.pop(operation_id, None)
        if changed is not None:
            changed.set()

    async def wait_for_change(self, operation_id: str, timeout_s: float) -> None:
        """Until this server records a change of the operation, or `timeout_s` passes (changes
        made by another replica are seen by reading storage again)."""
        changed = self._changed.setdefault(operation_id, anyio.Event())
        with anyio.move_on_after(timeout_s):
            await changed.wait()
        # Not kept for an operation nobody here runs (no wake would ever remove it): a watcher
        # that shared it only looks at storage a moment later.
        if not changed.is_set() and self._changed.get(operation_id) is changed:
            del self._changed[operation_id]

    async def cancel(self, record: OperationRecord) -> None:
        """Stop an unfinished operation wherever it runs; returns once it has ended (or at
        once, for a finished one)."""
        running = self._running.get(record.operation_id)
        if running is not None:
            running.cancel()
            await running.finished.wait()
            return
        if not await self._storage.request_operation_cancel(record.tenant, record.operation_id):
            return  # finished meanwhile
        # Its replica hears of it at its next progress write; a dead one's is ended by a sweep.
        while True:
            await self.wait_for_change(record.operation_id, self._replica.tick_s)
            current = await self._storage.get_operation(record.tenant, record.operation_id)
            if current is None or current.state != rank_pb2.JOB_STATE_RUNNING:
                return
