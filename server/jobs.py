"""Creates, resumes, cancels and drains jobs. Every runner is a task in one task group."""

from __future__ import annotations

import secrets
import time
from types import TracebackType

import anyio
import structlog
from anyio.abc import TaskGroup
from google.rpc import code_pb2

from tierank.server import metrics
from tierank.server.convert import judge_config, pool_context
from tierank.server.errors import FieldViolation, invalid_argument
from tierank.server.hub import EventHub
from tierank.server.judges.base import Judge, JudgeConfigError, PoolContext
from tierank.server.judges.registry import JudgeFactory
from tierank.server.runner import JobRunner
from tierank.server.storage.base import DuplicateRequest, EventRow, JobRecord, JobUpdate, Storage
from tierank.server.validation import validate_spec
from tierank.server.views import job_summary
from tierank.v1 import rank_pb2

DEFAULT_TENANT = "default"


def new_job_id() -> str:
    """Sortable by creation time, so listing newest-first needs no extra index."""
    return f"{time.time_ns() // 1_000_000:012x}{secrets.token_hex(6)}"


class JobManager:
    def __init__(self, storage: Storage, factory: JudgeFactory, hub: EventHub) -> None:
        self._storage = storage
        self._factory = factory
        self._hub = hub
        self._runners: dict[str, JobRunner] = {}
        self._tasks: TaskGroup | None = None
        self._log = structlog.get_logger()

    async def __aenter__(self) -> JobManager:
        self._tasks = anyio.create_task_group()
        await self._tasks.__aenter__()
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

    def _build_judges(self, spec: rank_pb2.JobSpec) -> tuple[PoolContext, list[Judge]]:
        """The job's passages and its judges; the runner gets the same pool, built once."""
        pool = pool_context(spec)
        judges: list[Judge] = []
        violations: list[FieldViolation] = []
        for i, judge in enumerate(spec.judges):
            try:
                judges.append(self._factory.build(judge_config(judge), pool))
            except JudgeConfigError as error:
                violations.append(FieldViolation(f"spec.judges[{i}].{error.field}", error.rule))
            except ValueError as error:  # a builder's own check, without a field of its own
                violations.append(FieldViolation(f"spec.judges[{i}]", str(error)))
        if violations:
            raise invalid_argument(violations)
        return pool, judges

    async def create(
        self, spec: rank_pb2.JobSpec, request_id: str, tenant: str = DEFAULT_TENANT
    ) -> tuple[JobRecord, bool]:
        """Validate, store and start a job; returns (job, created)."""
        violations = validate_spec(spec, self._factory.knows)
        if violations:
            raise invalid_argument(violations)
        pool, judges = self._build_judges(spec)
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
        )
        accepted = rank_pb2.JobEvent(
            job=f"jobs/{record.job_id}",
            sequence=1,
            accepted=rank_pb2.JobAccepted(job=job_summary(record)),
        )
        accepted.time.FromNanoseconds(int(now * 1e9))
        try:
            record = await self._storage.create_job(
                record, EventRow(1, "accepted", now, accepted.SerializeToString())
            )
        except DuplicateRequest as duplicate:
            for judge in judges:
                await judge.aclose()
            return duplicate.existing, False
        metrics.JOBS_CREATED.inc()
        self._start(record, spec, pool, judges)
        return record, True

    def _start(
        self, record: JobRecord, spec: rank_pb2.JobSpec, pool: PoolContext, judges: list[Judge]
    ) -> None:
        runner = JobRunner(
            job_id=record.job_id,
            tenant=record.tenant,
            spec=spec,
            pool=pool,
            judges=judges,
            storage=self._storage,
            hub=self._hub,
            last_sequence=record.last_sequence,
            create_time=record.create_time,
        )
        self._runners[record.job_id] = runner
        assert self._tasks is not None
        self._tasks.start_soon(self._supervise, runner, name=f"job {record.job_id}")

    async def _supervise(self, runner: JobRunner) -> None:
        try:
            await runner.run()
        finally:
            self._runners.pop(runner.job_id, None)

    async def _resume_unfinished(self) -> None:
        for record in await self._storage.unfinished_jobs():
            spec = rank_pb2.JobSpec.FromString(record.spec)
            try:
                pool, judges = self._build_judges(spec)
            except Exception as error:
                await self._fail_unresumable(record, f"cannot rebuild judges: {error}")
                continue
            self._log.info("resuming job", job_id=record.job_id)
            self._start(record, spec, pool, judges)

    async def _fail_unresumable(self, record: JobRecord, message: str) -> None:
        error = rank_pb2.JobError(code=code_pb2.FAILED_PRECONDITION, message=message)
        sequence = record.last_sequence + 1
        event = rank_pb2.JobEvent(
            job=f"jobs/{record.job_id}", sequence=sequence, failed=rank_pb2.JobFailed(error=error)
        )
        now = time.time()
        event.time.FromNanoseconds(int(now * 1e9))
        await self._storage.commit(
            record.job_id,
            JobUpdate(
                events=[EventRow(sequence, "failed", now, event.SerializeToString())],
                state=rank_pb2.JOB_STATE_FAILED,
                error_code=error.code,
                error_message=message,
            ),
        )

    async def cancel(self, job_id: str) -> None:
        runner = self._runners.get(job_id)
        if runner is not None:
            runner.request_cancel()
            await runner.finished.wait()

    async def drain(self, grace_s: float) -> None:
        """Stop planning new calls and let the calls in flight land; jobs stay resumable."""
        runners = list(self._runners.values())
        for runner in runners:
            runner.request_drain()
        with anyio.move_on_after(grace_s):
            for runner in runners:
                await runner.finished.wait()
