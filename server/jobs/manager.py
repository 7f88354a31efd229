"""Creates, claims, cancels and drains jobs. Every runner is a task in one task group.

A job runs on the replica holding its lease (server/storage/base.py: Lease). Each replica
beats every tick: it renews the leases of the jobs it runs (a lease lost to another replica
stops its runner at once), and claims free jobs up to its share, the unfinished jobs divided
among the live replicas, so that no replica takes everything at start-up. A job created here is
claimed here; one handed back by a draining replica, or left by a dead one once its lease
expires, is claimed by whoever looks first. Cancels and event wake-ups from other replicas
arrive as storage changes.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Protocol

import anyio
import structlog
from anyio.abc import TaskGroup
from google.protobuf.message import DecodeError
from google.rpc import code_pb2

from tierank.resources import FINAL_JOB_STATES
from tierank.server import metrics
from tierank.server.errors import (
    MAX_ERROR_TEXT_BYTES,
    FieldViolation,
    InvalidInput,
    StorageError,
    Unavailable,
    clip,
)
from tierank.server.jobs.admission import admit, as_requested
from tierank.server.jobs.hub import EventHub
from tierank.server.jobs.in_flight import CallsInFlight
from tierank.server.jobs.journal import continued_journal
from tierank.server.jobs.provider_batches import BatchDesk, BatchedJudge
from tierank.server.jobs.replica import Replica
from tierank.server.jobs.runner import JobRunner, JobRunStore
from tierank.server.jobs.steps import StepThread, TenantActivity
from tierank.server.judges.base import Judge, JudgeConfigError, PoolContext
from tierank.server.judges.llm import LLMJudge
from tierank.server.judges.registry import JudgeFactory
from tierank.server.names import batch_owner, job_name, new_sortable_id
from tierank.server.observability.tracing import current_trace_context, in_stored_trace
from tierank.server.storage.base import (
    CANCEL,
    EVENTS,
    FREED,
    RESYNC,
    Claim,
    DuplicateRequest,
    EventRow,
    JobRecord,
    JobUpdate,
    JournalRow,
    Lease,
    LeaseStore,
    Limits,
    ProviderBatchJournal,
    QualificationStore,
)
from tierank.server.tenancy.provider_accounts import ProviderAccounts
from tierank.server.tenancy.spending import SpendLedger
from tierank.server.wire.jobs import job_summary
from tierank.server.wire.specs import judge_config, pool_context, tournament_config
from tierank.v1 import rank_pb2

# A write on the way out (a lease handed back, leaving the membership) waits no longer than
# this for an unreachable database: the lease expires anyway.
_LAST_WRITE_S = 2.0
# What a client refused during a shutdown is told, and how long to wait before retrying.
SHUTTING_DOWN = "the server is shutting down; retry on another server"
SHUTTING_DOWN_RETRY_AFTER_S = 1.0


def same_request(stored_spec: bytes, spec: rank_pb2.JobSpec) -> bool:
    """Whether a stored job was created from this spec (compared as messages: serialized
    bytes are not canonical, e.g. map order), less what admission filled in."""
    try:
        stored = rank_pb2.JobSpec.FromString(stored_spec)
    except DecodeError:
        return False
    return as_requested(stored) == as_requested(spec)


@dataclass
class _Creation:
    """The outcome of storing a new job, handed from the task that owns the job to the RPC."""

    done: anyio.Event = field(default_factory=anyio.Event)
    stored: JobRecord | None = None
    error: Exception | None = None


class ManagedJobStore(JobRunStore, LeaseStore, QualificationStore, ProviderBatchJournal, Protocol):
    """What the manager uses of storage: the jobs it creates and runs under leases, the
    judges' qualifications that admission checks, and the provider batches of judges in
    batch mode."""


class JobManager:
    def __init__(
        self,
        storage: ManagedJobStore,
        factory: JudgeFactory,
        hub: EventHub,
        accounts: ProviderAccounts,
        spending: SpendLedger,
        replica: Replica,
        activity: TenantActivity | None = None,
    ) -> None:
        """`activity`: which tenants call the server, told by the RPC edge (StepThread)."""
        self._storage = storage
        self._factory = factory
        self._hub = hub
        self._accounts = accounts
        self._spending = spending
        self._replica = replica
        self._steps = StepThread(activity)
        self._in_flight: CallsInFlight | None = None  # with the task group, on entering
        self._batches = BatchDesk(storage, replica.replica_id, factory.batch_settings)
        self._runners: dict[str, JobRunner] = {}
        self._leases: dict[str, Lease] = {}
        self._tasks: TaskGroup | None = None
        self._draining = False
        self._look_now = anyio.Event()
        # Set on the way out: the beats stop between two beats, not in the middle of one (a
        # query cancelled half-way costs its pooled connection, and psycopg says so).
        self._stop_beating = False
        self._beats_stopped = anyio.Event()
        self._log = structlog.get_logger().bind(replica=replica.replica_id)

    async def __aenter__(self) -> JobManager:
        await self._steps.__aenter__()
        self._tasks = anyio.create_task_group()
        await self._tasks.__aenter__()
        # A lost lease comes back to this server after it expires and a beat claims the job:
        # calls left in flight wait that long, twice over, to be taken up.
        adopt_within_s = 2 * self._replica.lease_s
        self._in_flight = CallsInFlight(self._storage, self._spending, adopt_within_s, self._tasks)
        self._tasks.start_soon(self._keep_beating, name="leases")
        self._tasks.start_soon(self._follow_changes, name="changes")
        self._tasks.start_soon(self._batches.run, name="provider batches")
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool | None:
        assert self._tasks is not None
        self._stop_beating = True
        self._look_now.set()
        with anyio.move_on_after(_LAST_WRITE_S):
            await self._beats_stopped.wait()
        self._tasks.cancel_scope.cancel()
        try:
            return await self._tasks.__aexit__(exc_type, exc, tb)
        finally:
            # Every runner has ended, and with it every step it submitted.
            with anyio.CancelScope(shield=True):
                await self._steps.__aexit__(None, None, None)
            with anyio.CancelScope(shield=True), anyio.move_on_after(_LAST_WRITE_S):
                try:
                    await self._storage.leave(self._replica.replica_id)
                except StorageError as error:
                    self._log.warning("could not leave the replica membership", error=str(error))

    @property
    def active_jobs(self) -> int:
        return len(self._runners)

    async def _build_judges(
        self, spec: rank_pb2.JobSpec, tenant: str, admitting: bool = False
    ) -> tuple[PoolContext, list[Judge]]:
        """The job's passages and its judges, on the tenant's own provider keys where it has
        them; the runner gets the same pool, built once. `admitting`: a new job, whose judges
        are then admitted on their qualifications (this fills in `spec`)."""
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
            raise InvalidInput(violations)
        if admitting:
            try:
                await admit(spec, judges, tenant, self._storage)
            except BaseException:
                for built in judges:
                    await built.aclose()
                raise
        return pool, judges

    def finished_event(self, job_id: str) -> anyio.Event | None:
        """Set when the job, run here, has ended and stored its end; None where it does not
        run here (another replica's, or ended already)."""
        runner = self._runners.get(job_id)
        return None if runner is None else runner.finished

    async def check_judges(self, spec: rank_pb2.JobSpec, tenant: str) -> None:
        """Raise what creating a job of `spec` would raise about its judges (unknown options,
        keys the tenant lacks, judges refused on their qualifications); builds and closes them.
        A study checks its ranking once this way, rather than failing every query's job."""
        _, judges = await self._build_judges(spec, tenant, admitting=True)
        for judge in judges:
            await judge.aclose()

    # -- leases -----------------------------------------------------------------------------

    async def _keep_beating(self) -> None:
        try:
            await self._beat_until_stopped()
        finally:
            self._beats_stopped.set()

    async def _beat_until_stopped(self) -> None:
        failing = False
        while not self._stop_beating:
            try:
                await self._beat()
            except StorageError as error:
                # Leases run out while the database is away; runners that lose theirs stop
                # when it is back (the renewal says so, or their next commit is refused).
                if not failing:
                    self._log.warning("cannot renew leases", error=str(error))
                failing = True
            else:
                if failing:
                    self._log.info("renewing leases again")
                failing = False
            with anyio.move_on_after(self._replica.tick_s):
                await self._look_now.wait()
            self._look_now = anyio.Event()

    async def _beat(self) -> None:
        """Announce this replica, renew its leases, and claim free jobs up to its share."""
        replica = self._replica
        membership = await self._storage.heartbeat(
            replica.replica_id, replica.lease_s, draining=self._draining
        )
        leases = list(self._leases.values())
        held = await self._storage.renew_leases(leases, replica.lease_s)
        for lease in leases:
            runner = self._runners.get(lease.job_id)
            if runner is None or self._leases.get(lease.job_id) != lease:
                continue  # it ended (or was claimed again) meanwhile
            if lease.job_id not in held:
                with in_stored_trace(runner.trace_context):
                    self._log.warning("lease lost to another replica", job_id=lease.job_id)
                metrics.LEASES_LOST.inc()
                runner.abandon()
            elif held[lease.job_id]:
                runner.request_cancel()
        # A draining replica still lands its calls: it counts itself until it has left.
        self._factory.share_limits(membership.live_replicas + self._draining)
        metrics.UNFINISHED_JOBS.set(membership.unfinished_jobs)
        if self._draining or not membership.live_replicas or not replica.takes_free_jobs:
            return
        share = math.ceil(membership.unfinished_jobs / membership.live_replicas)
        wanted = share - len(self._leases)
        if wanted <= 0:  # the usual beat: no claim (on SQLite, a read of every unfinished job)
            return
        for claim in await self._storage.claim_jobs(replica.replica_id, replica.lease_s, wanted):
            with in_stored_trace(claim.job.trace_context):
                self._log.info("claimed job", job_id=claim.job.job_id, epoch=claim.lease.epoch)
            metrics.LEASE_TAKEOVERS.inc()  # new jobs are claimed where they are created
            # Renewed from the next beat on, and resumed off the beat: resuming reads storage
            # (the tenant's keys), and a beat that resumed a dozen claims one after the other
            # renewed no lease meanwhile, so that a busy replica lost live jobs to another.
            self._leases[claim.job.job_id] = claim.lease
            assert self._tasks is not None
            self._tasks.start_soon(self._take_up, claim, name=f"resume {claim.job.job_id}")

    async def _take_up(self, claim: Claim) -> None:
        """Resume a job a beat claimed; one that cannot be read now is left to its lease."""
        job_id = claim.job.job_id
        try:
            await self._resume(claim)
        except StorageError as error:
            self._log.warning("could not resume a claimed job", job_id=job_id, error=str(error))
            if self._leases.get(job_id) == claim.lease:
                del self._leases[job_id]  # it expires, and whoever looks first resumes it

    async def _follow_changes(self) -> None:
        async for change in self._storage.changes():
            if change.kind == EVENTS:
                await self._hub.notify(change.job_id, change.sequence)
            elif change.kind == CANCEL:
                runner = self._runners.get(change.job_id)
                if runner is not None:
                    runner.request_cancel()
            elif change.kind == FREED:
                self._look_now.set()
            elif change.kind == RESYNC:
                await self._hub.resync()
                self._look_now.set()

    def knows_provider(self, provider: str) -> bool:
        return self._factory.knows(provider)

    async def create(
        self,
        spec: rank_pb2.JobSpec,
        request_id: str,
        tenant: str,
        limits: Limits,
        *,
        continues: str = "",
    ) -> tuple[JobRecord, bool]:
        """Store and start a job whose spec the API edge has validated; returns (job, created).

        A reused `request_id` returns the job it created, if the spec is the same; with a
        different spec it is an error (AIP-155). Raises QuotaExceeded past the tenant's
        concurrency or rate `limits`. `continues`: the id of a job of `tenant` over a pool that
        this one's contains, whose verdicts this job starts from (journal.continued_journal):
        its calls are neither asked nor paid for again, and count in this job's stats.
        """
        if self._draining:
            raise Unavailable(SHUTTING_DOWN, SHUTTING_DOWN_RETRY_AFTER_S)
        requested = spec
        spec = rank_pb2.JobSpec()
        spec.CopyFrom(requested)
        pool, judges = await self._build_judges(spec, tenant, admitting=True)
        journal: list[JournalRow] = []
        if continues:
            previous = await self._storage.read_journal(continues)
            journal = continued_journal(previous, tournament_config(spec))
        now = time.time()
        record = JobRecord(
            job_id=new_sortable_id(),
            tenant=tenant,
            request_id=request_id,
            state=rank_pb2.JOB_STATE_PENDING,
            spec=spec.SerializeToString(),
            query=spec.query,
            candidate_count=len(spec.candidates),
            create_time=now,
            update_time=now,
            last_sequence=1,
            trace_context=current_trace_context(),
        )
        accepted = rank_pb2.JobEvent(
            job=job_name(record.job_id),
            sequence=1,
            accepted=rank_pb2.JobAccepted(job=job_summary(record)),
        )
        # The judges as admitted, so that a watcher learns how each was let in as it starts.
        accepted.accepted.job.spec.judges.extend(spec.judges)
        accepted.time.FromNanoseconds(int(now * 1e9))
        first_event = EventRow(1, "accepted", now, accepted.SerializeToString())
        # One task the manager owns stores the job and runs it; the RPC only waits for the
        # store. A client that gives up meanwhile (a deadline, a disconnect) cancels the RPC,
        # never the job: a stored job always runs, and a job that runs is always stored.
        runner = self._runner(record, spec, pool, judges)
        creation = _Creation()
        self._start(
            runner, self._store_and_run, record, first_event, limits, journal, runner, creation
        )
        await creation.done.wait()
        if creation.error is not None:
            raise creation.error
        if creation.stored is None:  # the server stopped while storing it
            raise Unavailable(SHUTTING_DOWN, SHUTTING_DOWN_RETRY_AFTER_S)
        if creation.stored.job_id == record.job_id:
            return creation.stored, True
        if not same_request(creation.stored.spec, spec):
            violation = FieldViolation(
                "request_id", f"was used for {creation.stored.job_id} with a different spec"
            )
            raise InvalidInput([violation])
        return creation.stored, False

    async def _store_and_run(
        self,
        record: JobRecord,
        first_event: EventRow,
        limits: Limits,
        journal: list[JournalRow],
        runner: JobRunner,
        creation: _Creation,
    ) -> None:
        try:
            creation.stored = await self._storage.create_job(record, first_event, limits, journal)
        except DuplicateRequest as duplicate:
            creation.stored = duplicate.existing
        except Exception as error:  # e.g. a full disk: the RPC reports it, the server goes on
            creation.error = error
        finally:
            creation.done.set()
        claim = None
        if creation.stored is not None and creation.stored.job_id == record.job_id:
            metrics.JOBS_CREATED.labels(record.tenant).inc()
            try:
                claim = await self._storage.claim_job(
                    record.job_id, self._replica.replica_id, self._replica.lease_s
                )
            except StorageError as error:  # stored, so whichever replica looks first runs it
                self._log.warning(
                    "could not claim a new job", job_id=record.job_id, error=str(error)
                )
        # Unclaimed (another replica was quicker, or the database went away): released here.
        await self._supervise(runner, claim.lease if claim else None)

    def _runner(
        self, record: JobRecord, spec: rank_pb2.JobSpec, pool: PoolContext, judges: list[Judge]
    ) -> JobRunner:
        owner = batch_owner(record.job_id, record.request_id)
        judges = [
            BatchedJudge(judge, self._batches, record.tenant, owner, record.job_id)
            if isinstance(judge, LLMJudge) and judge.batch_mode
            else judge
            for judge in judges
        ]
        return JobRunner(
            job_id=record.job_id,
            tenant=record.tenant,
            spec=spec,
            pool=pool,
            judges=judges,
            storage=self._storage,
            hub=self._hub,
            spending=self._spending,
            steps=self._steps,
            in_flight=self._calls_in_flight(),
            last_sequence=record.last_sequence,
            create_time=record.create_time,
            trace_context=record.trace_context,
        )

    def _calls_in_flight(self) -> CallsInFlight:
        assert self._in_flight is not None, "runners are made once the manager has started"
        return self._in_flight

    def _start(
        self, runner: JobRunner, task: Callable[..., Coroutine[Any, Any, None]], *args: object
    ) -> None:
        """Run `task` in the manager's task group, with `runner` known from now on: a cancel
        that finds the job (even one still being stored) finds its runner too."""
        self._runners[runner.job_id] = runner
        assert self._tasks is not None
        self._tasks.start_soon(task, *args, name=runner.name)

    async def _supervise(self, runner: JobRunner, lease: Lease | None) -> None:
        """Run the runner under `lease` (or only release it, without one), then forget it and
        hand the lease back: another replica can claim the job at once if it is unfinished."""
        try:
            if lease is None:
                await runner.discard()
            else:
                self._leases[runner.job_id] = lease
                await runner.run(lease)
        finally:
            self._runners.pop(runner.job_id, None)
            if lease is not None and self._leases.get(runner.job_id) == lease:
                del self._leases[runner.job_id]
                with anyio.CancelScope(shield=True), anyio.move_on_after(_LAST_WRITE_S):
                    try:
                        await self._storage.release_lease(lease)
                    except StorageError as error:  # it expires instead
                        self._log.warning(
                            "could not hand a job back", job_id=runner.job_id, error=str(error)
                        )

    async def _resume(self, claim: Claim) -> JobRunner | None:
        """Start a claimed job's runner; a job that cannot run any more fails alone. In the
        job's stored trace (not, say, a cancelling call's): its lines, and the tasks that run
        or fail it."""
        with in_stored_trace(claim.job.trace_context):
            return await self._resume_traced(claim)

    async def _resume_traced(self, claim: Claim) -> JobRunner | None:
        record, lease = claim.job, claim.lease
        try:
            spec = rank_pb2.JobSpec.FromString(record.spec)
        except DecodeError as error:
            self._fail_soon(claim, f"its stored spec is damaged and cannot be read: {error}")
            return None
        try:
            pool, judges = await self._build_judges(spec, record.tenant)
        except StorageError:
            raise  # not the job's fault: it resumes once storage answers
        except Exception as error:  # an InvalidInput says which judge field, as a client reads it
            self._fail_soon(claim, f"cannot rebuild judges: {error}")
            return None
        runner = self._runner(record, spec, pool, judges)
        if claim.cancel_requested:
            runner.request_cancel()
        self._start(runner, self._supervise, runner, lease)
        return runner

    def _fail_soon(self, claim: Claim, message: str) -> None:
        self._log.error("job cannot resume", job_id=claim.job.job_id, error=message)
        assert self._tasks is not None
        self._leases[claim.job.job_id] = claim.lease
        self._tasks.start_soon(self._fail_unresumable, claim, message)

    async def _fail_unresumable(self, claim: Claim, message: str) -> None:
        record = claim.job
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
            await self._storage.commit(record.job_id, update, claim.lease)
        except Exception:  # the job stays unfinished; its lease expires and it is tried again
            self._log.exception("could not record that a job cannot resume", job_id=record.job_id)
            return
        finally:
            self._leases.pop(record.job_id, None)
        await self._hub.publish(record.job_id, [event])

    async def cancel(self, record: JobRecord) -> None:
        """End a job as cancelled, whatever its state and wherever it runs; a finished job is
        left as it is. Returns once the job has ended."""
        job_id, tenant = record.job_id, record.tenant
        runner = self._runners.get(job_id)
        if runner is None:
            if not await self._storage.request_cancel(tenant, job_id):
                return  # finished meanwhile, or gone
            # Checked again after the write: a concurrent cancel may have started one.
            runner = self._runners.get(job_id)
        if runner is None:
            # Nobody runs it (e.g. stopped by a drain): it runs here only to record what it has
            # and end as cancelled. Otherwise its replica hears of the cancel and ends it.
            claim = await self._storage.claim_job(
                job_id, self._replica.replica_id, self._replica.lease_s
            )
            runner = None
            if claim is not None:
                runner = await self._resume(claim)
        if runner is None:
            await self._until_finished(tenant, job_id)
            return
        runner.request_cancel()
        await runner.finished.wait()

    async def _until_finished(self, tenant: str, job_id: str) -> None:
        with self._hub.watching(job_id) as channel:
            while True:
                record = await self._storage.get_job(tenant, job_id)
                if record is None or record.state in FINAL_JOB_STATES:
                    return
                await channel.wait_beyond(record.last_sequence, self._replica.tick_s)

    async def drain(self, grace_s: float) -> None:
        """Refuse new jobs, stop planning new calls and let the calls in flight land, then hand
        every job back; jobs stay resumable, here or on another replica."""
        self._draining = True
        self._look_now.set()  # others stop counting this replica in their share
        runners = list(self._runners.values())
        for runner in runners:
            runner.request_drain()
        with anyio.move_on_after(grace_s):
            for runner in runners:
                await runner.finished.wait()
