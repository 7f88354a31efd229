"""Creates, resumes, cancels and drains jobs. Every runner is a task in one task group."""

from __future__ import annotations

import secrets
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from types import TracebackType

import anyio
import structlog
from anyio.abc import TaskGroup
from google.protobuf.message import DecodeError
from google.rpc import code_pb2

from tierank.server import metrics
from tierank.server.errors import (
    MAX_ERROR_TEXT_BYTES,
    ApiError,
    FieldViolation,
    clip,
    invalid_argument,
    unavailable,
)
from tierank.server.job_states import TERMINAL_STATES
from tierank.server.jobs.convert import judge_config, pool_context
from tierank.server.jobs.hub import EventHub
from tierank.server.jobs.runner import JobRunner
from tierank.server.jobs.views import job_summary
from tierank.server.judges.base import Judge, JudgeConfigError, PoolContext
from tierank.server.judges.registry import JudgeFactory
from tierank.server.names import job_name
from tierank.server.storage.base import (
    DuplicateRequest,
    EventRow,
    JobRecord,
    JobUpdate,
    Limits,
    Storage,
    StorageError,
)
from tierank.server.tenancy.provider_accounts import ProviderAccounts
from tierank.server.tenancy.spending import SpendLedger
from tierank.v1 import rank_pb2

# What a client refused during a shutdown is told, and how long to wait before retrying.
SHUTTING_DOWN = "the server is shutting down; retry on another server"
SHUTTING_DOWN_RETRY_AFTER_S = 1.0


def new_job_id() -> str:
    """Sortable by creation time, so listing newest-first needs no extra index."""
    return f"{time.time_ns() // 1_000_000:012x}{secrets.token_hex(6)}"


def same_request(stored_spec: bytes, spec: rank_pb2.JobSpec) -> bool:
    """Whether a stored job was created from this spec (compared as messages: serialized
    bytes are not canonical, e.g. map order)."""
    try:
        return rank_pb2.JobSpec.FromString(stored_spec) == spec
    except DecodeError:
        return False


@dataclass
class _Creation:
    """The outcome of storing a new job, handed from the task that owns the job to the RPC."""

    done: anyio.Event = field(default_factory=anyio.Event)
    stored: JobRecord | None = None
    error: Exception | None = None


class JobManager:
    def __init__(
        self, storage: Storage, factory: JudgeFactory, hub: EventHub, accounts: ProviderAccounts
    ) -> None:
        self._storage = storage
        self._factory = factory
        self._hub = hub
        self._accounts = accounts
        self._spending = SpendLedger(storage)
        self._runners: dict[str, JobRunner] = {}
        self._tasks: TaskGroup | None = None
        self._draining = False
        self._log = structlog.get_logger()

    async def __aenter__(self) -> JobManager:
        self._tasks = anyio.create_task_group()
        await self._tasks.__aenter__()
        try:
            released = await self._storage.release_reservations()
        except StorageError as error:
            # Open reservations keep holding their spend (the safe side); the next start
            # settles them.
            self._log.warning("could not settle the last run's reservations", error=str(error))
        else:
            if released:
                # Calls in flight when the server stopped may have been paid for: kept as spent.
                self._log.info("settled reservations left by the last run", count=released)
        await self._resume_unfinished()
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
    def active_jobs(self) -> int:
        return len(self._runners)

    async def _build_judges(
        self, spec: rank_pb2.JobSpec, tenant: str
    ) -> tuple[PoolContext, list[Judge]]:
        """The job's passages and its judges, on the tenant's own provider keys where it has
        them; the runner gets the same pool, built once."""
        accounts = await self._accounts.resolve(
            tenant, ((f"spec.judges[{i}].provider", j.provider) for i, j in enumerate(spec.judges))
        )
        pool = pool_context(spec)
        judges: list[Judge] = []
        violations: list[FieldViolation] = []
        for i, judge in enumerate(spec.judges):
            try:
                judges.append(
                    self._factory.build(judge_config(judge), pool, accounts.get(judge.provider))
                )
            except JudgeConfigError as error:
                violations.append(FieldViolation(f"spec.judges[{i}].{error.field}", error.rule))
            except ValueError as error:  # a builder's own check, without a field of its own
                violations.append(FieldViolation(f"spec.judges[{i}]", str(error)))
        if violations:
            raise invalid_argument(violations)
        return pool, judges

    def knows_provider(self, provider: str) -> bool:
        return self._factory.knows(provider)

    async def create(
        self, spec: rank_pb2.JobSpec, request_id: str, tenant: str, limits: Limits
    ) -> tuple[JobRecord, bool]:
        """Store and start a job whose spec the API edge has validated; returns (job, created).

        A reused `request_id` returns the job it created, if the spec is the same; with a
        different spec it is an error (AIP-155). Raises QuotaExceeded past the tenant's
        concurrency or rate `limits`.
        """
        if self._draining:
            raise unavailable(SHUTTING_DOWN, SHUTTING_DOWN_RETRY_AFTER_S)
        pool, judges = await self._build_judges(spec, tenant)
        now = time.time()
        record = JobRecord(
            job_id=new_job_id(),
            tenant=tenant,
            request_id=request_id,
            state=rank_pb2.JOB_STATE_PENDING,
            spec=spec.SerializeToString(),
            query=spec.query,
            candidate_count=len(spec.candidates),
            create_time=now,
            update_time=now,
            last_sequence=1,
        )
        accepted = rank_pb2.JobEvent(
            job=job_name(record.job_id),
            sequence=1,
            accepted=rank_pb2.JobAccepted(job=job_summary(record)),
        )
        accepted.time.FromNanoseconds(int(now * 1e9))
        first_event = EventRow(1, "accepted", now, accepted.SerializeToString())
        # One task the manager owns stores the job and runs it; the RPC only waits for the
        # store. A client that gives up meanwhile (a deadline, a disconnect) cancels the RPC,
        # never the job: a stored job always runs, and a job that runs is always stored.
        runner = self._runner(record, spec, pool, judges)
        creation = _Creation()
        self._start(runner, self._store_and_run, record, first_event, limits, runner, creation)
        await creation.done.wait()
        if creation.error is not None:
            raise creation.error
        if creation.stored is None:  # the server stopped while storing it
            raise unavailable(SHUTTING_DOWN, SHUTTING_DOWN_RETRY_AFTER_S)
        if creation.stored.job_id == record.job_id:
            return creation.stored, True
        if not same_request(creation.stored.spec, spec):
            violation = FieldViolation(
                "request_id", f"was used for {creation.stored.job_id} with a different spec"
            )
            raise invalid_argument([violation])
        return creation.stored, False

    async def _store_and_run(
        self,
        record: JobRecord,
        first_event: EventRow,
        limits: Limits,
        runner: JobRunner,
        creation: _Creation,
    ) -> None:
        try:
            creation.stored = await self._storage.create_job(record, first_event, limits)
        except DuplicateRequest as duplicate:
            creation.stored = duplicate.existing
        except Exception as error:  # e.g. a full disk: the RPC reports it, the server goes on
            creation.error = error
        finally:
            creation.done.set()
        stored = creation.stored is not None and creation.stored.job_id == record.job_id
        if stored:
            metrics.JOBS_CREATED.labels(record.tenant).inc()
        await self._supervise(runner, run=stored)

    def _runner(
        self, record: JobRecord, spec: rank_pb2.JobSpec, pool: PoolContext, judges: list[Judge]
    ) -> JobRunner:
        return JobRunner(
            job_id=record.job_id,
            tenant=record.tenant,
            spec=spec,
            pool=pool,
            judges=judges,
            storage=self._storage,
            hub=self._hub,
            spending=self._spending,
            last_sequence=record.last_sequence,
            create_time=record.create_time,
        )

    def _start(
        self, runner: JobRunner, task: Callable[..., Awaitable[None]], *args: object
    ) -> None:
        """Run `task` in the manager's task group, with `runner` known from now on: a cancel
        that finds the job (even one still being stored) finds its runner too."""
        self._runners[runner.job_id] = runner
        assert self._tasks is not None
        self._tasks.start_soon(task, *args, name=runner.name)

    async def _supervise(self, runner: JobRunner, run: bool = True) -> None:
        """Run the runner (or only release it, for a job that was not stored), then forget it."""
        try:
            if run:
                await runner.run()
            else:
                await runner.discard()
        finally:
            self._runners.pop(runner.job_id, None)

    async def _resume_unfinished(self) -> None:
        for record in await self._storage.unfinished_jobs():
            self._log.info("resuming job", job_id=record.job_id)
            await self._resume(record)

    async def _resume(self, record: JobRecord) -> JobRunner | None:
        """Start a stored job's runner again; a job that cannot run any more fails alone."""
        try:
            spec = rank_pb2.JobSpec.FromString(record.spec)
        except DecodeError as error:
            self._fail_soon(record, f"its stored spec is damaged and cannot be read: {error}")
            return None
        try:
            pool, judges = await self._build_judges(spec, record.tenant)
        except ApiError as error:
            self._fail_soon(record, f"cannot rebuild judges: {error.status.message}")
            return None
        except Exception as error:
            self._fail_soon(record, f"cannot rebuild judges: {error}")
            return None
        started = self._runners.get(record.job_id)
        if started is not None:  # a concurrent cancel resumed it meanwhile
            for judge in judges:
                await judge.aclose()
            return started
        runner = self._runner(record, spec, pool, judges)
        self._start(runner, self._supervise, runner)
        return runner

    def _fail_soon(self, record: JobRecord, message: str) -> None:
        self._log.error("job cannot resume", job_id=record.job_id, error=message)
        assert self._tasks is not None
        self._tasks.start_soon(self._fail_unresumable, record, message)

    async def _fail_unresumable(self, record: JobRecord, message: str) -> None:
        message = clip(message, MAX_ERROR_TEXT_BYTES)
        error = rank_pb2.JobError(code=code_pb2.FAILED_PRECONDITION, message=message)
        sequence = record.last_sequence + 1
        event = rank_pb2.JobEvent(
            job=job_name(record.job_id), sequence=sequence, failed=rank_pb2.JobFailed(error=error)
        )
        now = time.time()
        event.time.FromNanoseconds(int(now * 1e9))
        update = JobUpdate(
            events=[EventRow(sequence, "failed", now, event.SerializeToString())],
            state=rank_pb2.JOB_STATE_FAILED,
            error_code=error.code,
            error_message=message,
        )
        try:
            await self._storage.commit(record.job_id, update)
        except Exception:  # the job stays unfinished; the next start tries again
            self._log.exception("could not record that a job cannot resume", job_id=record.job_id)
            return
        await self._hub.publish(record.job_id, [event])

    async def cancel(self, record: JobRecord) -> None:
        """End a job as cancelled, whatever its state; a finished job is left as it is."""
        job_id = record.job_id
        runner = self._runners.get(job_id)
        if runner is None:
            record = await self._storage.get_job(record.tenant, job_id)
            # Checked again after the read: a concurrent cancel may have started one.
            runner = self._runners.get(job_id)
            if runner is None:
                if record is None or record.state in TERMINAL_STATES:
                    return
                # An unfinished job with no runner here (e.g. stopped by a drain) runs again
                # only to record what it has and end as cancelled.
                runner = await self._resume(record)
                if runner is None:
                    return
        runner.request_cancel()
        await runner.finished.wait()

    async def drain(self, grace_s: float) -> None:
        """Refuse new jobs, stop planning new calls and let the calls in flight land; jobs
        stay resumable."""
        self._draining = True
        runners = list(self._runners.values())
        for runner in runners:
            runner.request_drain()
        with anyio.move_on_after(grace_s):
            for runner in runners:
                await runner.finished.wait()
