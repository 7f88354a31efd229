"""Running studies: each query's pool becomes a job, a bounded number at a time, within the
study's budget and deadline, until every query's job has ended.

Everything the driver decides is in storage before it acts on it, and every action can be
taken twice: a query's budget and deadline are fixed (`assign_study_query`) before its job is
created, and the job's request_id is the study's and the query's, so a driver that stopped
anywhere (a restart, kill -9, another replica taking the lease over) creates the same job
again, which the job store answers with the one it made. A study is driven by one replica at a
time, under a lease it renews on each pass.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Protocol

import anyio
import structlog
from anyio.abc import TaskGroup

from tierank.limits import DEFAULT_BATCH_LIVE_QUERIES, DEFAULT_LIVE_QUERIES
from tierank.resources import FINAL_JOB_STATES, FINAL_STUDY_STATES
from tierank.server import metrics
from tierank.server.errors import QuotaExceeded, TierankError, Unavailable
from tierank.server.jobs.manager import JobManager
from tierank.server.judges.graders import Grader
from tierank.server.judges.llm import BATCH_MODE, MODE_OPTION
from tierank.server.names import parse_job_name, study_request_id
from tierank.server.observability.studies import StudySpan, StudyTelemetry
from tierank.server.storage.base import (
    EventRow,
    JobReader,
    JobRecord,
    StudyQueryRow,
    StudyRecord,
    StudyStore,
    TenantStore,
)
from tierank.server.studies.extension import pooled_systems
from tierank.server.studies.grading import (
    ProbeTally,
    StudyGrading,
    leverage,
    measure_cutoff,
    probe_count,
    probe_rate,
)
from tierank.server.studies.progress import (
    ProgressBook,
    add_usage,
    carried_outcome,
    every_query,
    judged_something,
    listwise_spend,
    outcome_of,
    round_start,
)
from tierank.server.tenancy.quotas import limits_of
from tierank.server.wire.common import usage_total
from tierank.server.wire.jobs import TIER_EVENT_KINDS
from tierank.v1 import rank_pb2, study_pb2

log = structlog.get_logger()

# How often a driver looks at its studies' jobs, and renews its leases on them.
PASS_INTERVAL_S = 0.25
# Studies one replica drives at once.
MAX_DRIVEN_STUDIES = 64
# The span attribute that says which round of a study (0: its start, then each extension).
_ROUND = "tierank.study.round"
# Queries a cancel reads at once to end those never started.
_CANCEL_PAGE = 500
# A study no judge answered fails with this code (google.rpc UNAVAILABLE): `tierank study`
# exits 3 ("no judge answered") for it.
NO_JUDGE_ANSWERED = 14
# How long a cancel waits for the probes in flight to be answered and recorded.
_PROBES_STOP_S = 30.0


class DriverStore(StudyStore, JobReader, TenantStore, Protocol):
    """What the driver reads and writes: studies, their jobs, their tenants' limits."""


def live_queries(spec: study_pb2.StudySpec) -> int:
    """Queries the study judges at once: its own bound, else the default of its kind."""
    if spec.max_live_queries:
        return spec.max_live_queries
    return DEFAULT_BATCH_LIVE_QUERIES if spec.provider_batch else DEFAULT_LIVE_QUERIES


# The final report (StudyReport bytes) of a study, from its record and final progress.
ReportBuilder = Callable[[StudyRecord, study_pb2.StudyProgress], Awaitable[bytes]]


class StudyDriver:
    def __init__(
        self,
        storage: DriverStore,
        manager: JobManager,
        grading: StudyGrading,
        replica_id: str,
        build_report: ReportBuilder,
        lease_s: float,
        *,
        drives_all: bool = True,
    ) -> None:
        """`lease_s`: a study whose driver stops renewing (a replica killed) is taken over after
        this long, as its jobs are (--lease-seconds). `drives_all`: drive every running study of
        the database; else only those started or cancelled through this server (an embedded
        server that runs only its own work)."""
        self.storage = storage
        self._drives_all = drives_all
        self._asked: set[str] = set()
        self.manager = manager
        self.grading = grading
        self.replica_id = replica_id
        self.lease_s = lease_s
        self.build_report = build_report
        self._driven: set[str] = set()
        self._nudged = anyio.Event()
        # Studies this replica cannot drive on now: why, and since when (their first failure).
        self._paused: dict[str, tuple[str, float]] = {}

    def pause_of(self, study_id: str) -> tuple[str, float] | None:
        """Why this replica cannot drive `study_id` on, and since when; None when it can (or
        does not drive it)."""
        return self._paused.get(study_id)

    def went_on(self, study_id: str) -> None:
        """The study's driver wrote again: it is no longer paused."""
        self._paused.pop(study_id, None)

    def nudge(self, study_id: str) -> None:
        """Drive `study_id` now: it was started or cancelled through this server."""
        self._asked.add(study_id)
        self._nudged.set()

    async def run(self) -> None:
        """Drive the studies this replica may, until cancelled."""
        async with anyio.create_task_group() as studies:
            while True:
                try:
                    claimed = await self._claim()
                except TierankError as error:
                    log.warning("could not claim studies", error=str(error))
                    claimed = []
                for record in claimed:
                    if record.study_id not in self._driven:
                        self._driven.add(record.study_id)
                        studies.start_soon(self._drive_guarded, record)
                with anyio.move_on_after(PASS_INTERVAL_S * 8):
                    await self._nudged.wait()
                self._nudged = anyio.Event()

    async def _claim(self) -> list[StudyRecord]:
        """The studies this replica may drive now: every one it may take, or only those it
        was asked to drive (leasing no other: a replica that drives all of them takes those)."""
        if self._drives_all:
            return await self.storage.claim_studies(
                self.replica_id, self.lease_s, MAX_DRIVEN_STUDIES
            )
        asked = []
        for study_id in sorted(self._asked - self._driven):
            record = await self.storage.claim_study(study_id, self.replica_id, self.lease_s)
            if record is not None:
                asked.append(record)
        return asked

    async def _drive_guarded(self, record: StudyRecord) -> None:
        study_log = log.bind(study=record.study_id, tenant=record.tenant)
        telemetry = StudyTelemetry(record)
        try:
            rounds = len(study_pb2.StudyInputs.FromString(record.inputs).rounds)
            # One span per take-up of the study's round, in the study's trace: the jobs it
            # creates are its children, so every query's runs join that trace too, and every
            # line the driver logs carries the trace's id.
            with telemetry.part("tierank.study.run", {_ROUND: max(0, rounds - 1)}) as span:
                await self._drive_traced(record, study_log, telemetry, span)
        finally:
            self._driven.discard(record.study_id)

    async def _drive_traced(
        self, record: StudyRecord, study_log: Any, telemetry: StudyTelemetry, span: StudySpan
    ) -> None:
        try:
            rows = await every_query(self.storage, record.study_id)
            progress = ProgressBook.recounted(record.progress, round_start(record), rows)
            await _Drive(self, record, study_log, progress, telemetry).run()
        # The drive's own tasks (its queries' probes) raise in groups: each kind is handled
        # whichever task raised it.
        except* TierankError as paused:
            # Storage gone or the like: the lease runs out and this or another replica resumes.
            error = paused.exceptions[0]
            study_log.warning("study paused", error=str(error))
            since = self._paused.get(record.study_id, ("", time.time()))[1]
            self._paused[record.study_id] = (str(error), since)
        except* Exception as failed:
            study_log.exception("study failed")
            span.failed(failed.exceptions[0])
            try:
                ended = await self.storage.finish_study(
                    record.study_id,
                    study_pb2.STUDY_STATE_FAILED,
                    record.progress,
                    b"",
                    error_code=13,
                    error_message="internal error while running the study",
                )
            except TierankError:
                study_log.exception("could not record the study's failure")
            else:
                if ended:
                    metrics.study_ended(record.tenant, study_pb2.STUDY_STATE_FAILED)


class _Drive:
    """One study, driven pass by pass."""

    def __init__(
        self,
        driver: StudyDriver,
        record: StudyRecord,
        study_log: Any,
        progress: ProgressBook,
        telemetry: StudyTelemetry,
    ) -> None:
        self._driver = driver
        self._telemetry = telemetry
        self._storage = driver.storage
        self._record = record
        self._log = study_log
        self._spec = study_pb2.StudySpec.FromString(record.spec)
        self._live_limit = live_queries(self._spec)
        self._progress = progress
        self._pointwise = self._spec.labels.WhichOneof("mapping") == "pointwise"
        self._grader: Grader | None = None
        # Queries whose probes are being asked, and whether new probes may start (not once
        # the study is being cancelled).
        self._grading: set[str] = set()
        # The (query, job) outcomes this drive has recorded: a pass reads its queries before a
        # probing task records one, and must not take it for unfinished (and count it twice).
        self._recorded: set[tuple[str, str]] = set()
        self._graded = anyio.Event()
        self._probing = True
        self._tasks: TaskGroup | None = None

    async def run(self) -> None:
        # The queries' probes are this drive's tasks: it ends once they have.
        async with anyio.create_task_group() as tasks:
            self._tasks = tasks
            await self._run()

    async def _run(self) -> None:
        study_id, tenant = self._record.study_id, self._record.tenant
        while True:
            record = await self._storage.get_study(tenant, study_id)
            if record is None or record.state in FINAL_STUDY_STATES:
                return
            # The live queries come first: jobs start in topic order.
            unfinished = await self._storage.study_queries(
                study_id, 0, 2 * self._live_limit, unfinished=True
            )
            live = [row for row in unfinished if row.job_id]
            if record.cancel_requested:
                await self._cancel(live)
                return
            still_live = [row for row in live if not await self._ended(row)]
            assignments = [rank_pb2.JobSpec.FromString(row.assignment) for row in still_live]
            for row in (row for row in unfinished if not row.job_id):
                if len(assignments) >= self._live_limit or await self._cancel_asked():
                    break  # a cancel asked for meanwhile is the next pass's
                started = await self._start(row, assignments)
                if started is None:
                    break  # the tenant's quota: the next pass tries again
                if isinstance(started, rank_pb2.JobSpec):
                    assignments.append(started)
            if not unfinished:
                if await self._top_up():
                    continue
                await self._finish(study_pb2.STUDY_STATE_SUCCEEDED)
                return
            await self._storage.update_study_progress(study_id, self._progress.to_bytes())
            self._driver.went_on(study_id)
            # Renews the lease; a study another replica took over is left to it.
            if not await self._still_ours():
                return
            await self._until_a_job_ends([row.job_id for row in still_live])

    async def _top_up(self) -> bool:
        """Spend what the study's budget has left, once every query has had its share, on the
        queries their shares left provisional, those with the most candidates whose place is
        still open (the labels that can still change) first: each is judged on by a job that
        continues its previous one. A query is topped up once; False when none is."""
        budget = self._spec.budget
        left = self._progress.budget_left(budget, [])
        if self._assign([]) is None or not budget.ByteSize():
            return False  # nothing left, or nothing limited (no query was cut short by it)
        with self._telemetry.step("tierank.study.top_up") as span:
            reopened = await self._reopen_provisional(left)
            span.set("tierank.study.queries_reopened", reopened)
        return reopened > 0

    async def _reopen_provisional(self, left: rank_pb2.Budget) -> int:
        """Reopen the queries `left` can pay for, most open candidates first; how many."""
        open_candidates: list[tuple[int, StudyQueryRow]] = []
        for row in await every_query(self._storage, self._record.study_id):
            outcome = study_pb2.StudyQuery.FromString(row.outcome) if row.outcome else None
            if (
                outcome is None
                or row.carried
                or not outcome.job
                or outcome.completion_reason != rank_pb2.COMPLETION_REASON_BUDGET_EXHAUSTED
            ):
                continue
            unsettled = await self._unsettled(parse_job_name(outcome.job))
            if unsettled:
                open_candidates.append((unsettled, row))
        if not open_candidates:
            return 0
        open_candidates.sort(key=lambda found: (-found[0], found[1].position))
        chosen = [row for _, row in open_candidates[: self._affordable_queries(left)]]
        for row in chosen:
            self._progress.reopened(study_pb2.StudyQuery.FromString(row.outcome))
        await self._storage.reopen_study_queries(
            self._record.study_id, [row.query_id for row in chosen], self._progress.to_bytes()
        )
        self._log.info("study tops up its provisional queries", queries=len(chosen))
        return len(chosen)

    def _affordable_queries(self, left: rank_pb2.Budget) -> int:
        """How many queries what is left can pay for a call each, at the study's mean call."""
        progress = self._progress.progress
        calls = max(1, progress.judge_calls)
        affordable = [left.max_judge_calls] if self._spec.budget.max_judge_calls else []
        if self._spec.budget.max_input_tokens:
            per_call = max(1, progress.usage.input_tokens // calls)
            affordable.append(left.max_input_tokens // per_call)
        if self._spec.budget.max_cost_usd and progress.usage.cost_usd > 0:
            affordable.append(int(left.max_cost_usd / (progress.usage.cost_usd / calls)))
        return max(1, min(affordable, default=1))

    async def _unsettled(self, job_id: str) -> int:
        """Candidates of the job's latest tiers whose place is still open."""
        latest = await self._storage.latest_event(self._record.tenant, job_id, TIER_EVENT_KINDS)
        if latest is None:
            return 0
        event = rank_pb2.JobEvent.FromString(latest.payload)
        tiers = event.completed.tiers if event.HasField("completed") else event.tiers_updated.tiers
        return sum(len(tier.candidate_ids) for tier in tiers if not tier.settled)

    async def _cancel_asked(self) -> bool:
        """Whether the study was cancelled (or ended) since the pass began: no job starts then."""
        record = await self._storage.get_study(self._record.tenant, self._record.study_id)
        return record is None or record.cancel_requested or record.state in FINAL_STUDY_STATES

    async def _until_a_job_ends(self, job_ids: Sequence[str]) -> None:
        """Wait until one of the jobs run here ends, or PASS_INTERVAL_S at most (jobs on other
        replicas, new ones, a cancel): a study's next query starts as soon as a slot is free."""
        ends = [e for e in map(self._driver.manager.finished_event, job_ids) if e is not None]
        with anyio.move_on_after(PASS_INTERVAL_S):
            async with anyio.create_task_group() as waiting:

                async def first_end(end: anyio.Event) -> None:
                    await end.wait()
                    waiting.cancel_scope.cancel()

                for end in ends:
                    waiting.start_soon(first_end, end)
                await anyio.sleep_forever()

    async def _still_ours(self) -> bool:
        renewed = await self._storage.claim_study(
            self._record.study_id, self._driver.replica_id, self._driver.lease_s
        )
        return renewed is not None

    async def _ended(self, row: StudyQueryRow) -> bool:
        """Whether the query is done: its job has ended and, for pointwise labels, its probes
        have been asked; its outcome is then recorded. A job that has just ended starts its
        query's probes (a task of this drive), which record the outcome when they are done."""
        tenant = self._record.tenant
        if (row.query_id, row.job_id) in self._recorded:
            return True
        if row.query_id in self._grading:
            return False
        job = await self._storage.get_job(tenant, row.job_id)
        if job is None or job.state not in FINAL_JOB_STATES:
            return False
        latest = await self._storage.latest_event(tenant, row.job_id, TIER_EVENT_KINDS)
        outcome = outcome_of(row, job, latest)
        if self._pointwise and latest is not None and judged_something(outcome, latest):
            self._grading.add(row.query_id)
            self._progress.progress.grading += 1
            assert self._tasks is not None  # set while the drive runs
            self._tasks.start_soon(self._grade, row, job, latest, outcome)
            return False
        await self._record_outcome(row, outcome)
        return True

    async def _record_outcome(self, row: StudyQueryRow, outcome: study_pb2.StudyQuery) -> None:
        self._recorded.add((row.query_id, row.job_id))
        self._progress.add(outcome, row=row)
        await self._storage.finish_study_query(
            self._record.study_id,
            row.query_id,
            outcome.SerializeToString(),
            self._progress.to_bytes(),
        )

    async def _grade(
        self, row: StudyQueryRow, job: JobRecord, latest: EventRow, outcome: study_pb2.StudyQuery
    ) -> None:
        """Ask the query's probes along its job's final order, then record its outcome with
        them (those of its previous job carried over, for a query judged again)."""
        carried = carried_outcome(row)
        known = {p.doc_id: p.grade for p in carried.probes} if carried is not None else {}
        tally = ProbeTally()
        try:
            if self._probing:
                tally = await self._probe(row, job, latest, known)
        except TierankError as error:  # the grader cannot be built (a key removed): no probes
            self._log.warning("query's probes not asked", query=row.query_id, error=str(error))
        finally:
            with anyio.CancelScope(shield=True):
                _add_probes(outcome, carried, tally)
                self._progress.progress.grading -= 1
                self._grading.discard(row.query_id)
                await self._record_outcome(row, outcome)
                if not self._grading:
                    self._graded.set()

    async def _probe(
        self, row: StudyQueryRow, job: JobRecord, latest: EventRow, known: dict[str, int]
    ) -> ProbeTally:
        grading = self._driver.grading
        if self._grader is None:
            self._grader = await grading.grader(self._record.tenant, self._spec)
        spec = rank_pb2.JobSpec.FromString(job.spec)
        event = rank_pb2.JobEvent.FromString(latest.payload)
        source = event.completed if event.HasField("completed") else event.tiers_updated
        order = [doc for tier in source.tiers for doc in tier.candidate_ids]
        count = probe_count(len(order), probe_rate(self._spec))
        assigned = rank_pb2.JobSpec.FromString(row.assignment) if row.assignment else None
        share = assigned.budget if assigned is not None and assigned.budget.ByteSize() else None
        allowed = grading.reservation(self._grader, spec, count, share)
        deadline = None
        if self._spec.deadline_seconds:
            left = self._record.start_time + self._spec.deadline_seconds - time.time()
            deadline = time.monotonic() + max(0.0, left)
        by_id = {c.id: c for c in spec.candidates}
        systems = pooled_systems(study_pb2.StudyInputs.FromString(self._record.inputs))
        weights = leverage(
            [by_id[doc] for doc in order], sorted(systems), measure_cutoff(self._spec)
        )
        return await grading.probe(
            self._grader,
            tenant=self._record.tenant,
            query_id=row.query_id,
            job=spec,
            order=order,
            count=count,
            weights=weights,
            known=known,
            allowed=allowed,
            seed=self._spec.labels.pointwise.seed,
            deadline=deadline,
            may_ask=lambda: self._probing,
        )

    async def _start(
        self, row: StudyQueryRow, live: Sequence[rank_pb2.JobSpec]
    ) -> rank_pb2.JobSpec | bool | None:
        """Create the query's job (or find the one made before a restart) and return its
        assignment; False when the query is not judged (nothing left to spend, or no time);
        None when the tenant's quota says wait."""
        study_id, tenant = self._record.study_id, self._record.tenant
        if row.assignment:
            assignment = rank_pb2.JobSpec.FromString(row.assignment)
        else:
            assigned = self._assign(live)
            if assigned is None:
                await self._not_judged(row, self._exhausted_reason())
                return False
            assignment = assigned
            await self._storage.assign_study_query(
                study_id, row.query_id, assignment.SerializeToString()
            )
        pool = await self._storage.read_study_pool(study_id, row.query_id)
        spec = query_job_spec(self._spec, pool, assignment)
        if self._pointwise and assignment.budget.ByteSize():
            await self._hold_probes(spec, assignment.budget)
        carried = carried_outcome(row)
        continues = ""
        if carried is not None:
            # It starts from the previous job's verdicts, whose spend counts in its budget.
            continues = parse_job_name(carried.job)
            _add_spent(spec.budget, listwise_spend(carried))
        limits = await limits_of(self._storage, tenant)
        try:
            job, _ = await self._driver.manager.create(
                spec,
                study_request_id(study_id, row.position, continues),
                tenant,
                limits,
                continues=continues,
            )
        except QuotaExceeded as wait:
            self._log.info("study waits for its tenant's quota", reason=str(wait))
            # No job was stored (a quota is checked after the request_id): the query's share
            # is drawn again when it can start, from the time and budget left then; kept, a
            # deadline share would count from a job created long after it was fixed.
            await self._storage.assign_study_query(study_id, row.query_id, b"")
            return None
        except Unavailable as wait:  # the server stops: whether the job was stored is unknown
            self._log.info("study waits for the server", reason=str(wait))
            return None
        await self._storage.set_study_query_job(study_id, row.query_id, job.job_id)
        self._progress.started()
        return assignment

    async def _hold_probes(self, job: rank_pb2.JobSpec, share: rank_pb2.Budget) -> None:
        """Take what the query's probes may cost out of its job's budget (`share`, the
        query's whole share): the probes spend it once the job has ended."""
        grading = self._driver.grading
        try:
            if self._grader is None:
                self._grader = await grading.grader(self._record.tenant, self._spec)
        except TierankError as error:
            self._log.warning("the study's grader cannot be built", error=str(error))
            return
        count = probe_count(len(job.candidates), probe_rate(self._spec))
        held = grading.reservation(self._grader, job, count, share)
        budget = job.budget
        # MAX_PROBE_SHARE keeps at least half of every limit the job's.
        if held.calls is not None:
            budget.max_judge_calls -= held.calls
        if held.input_tokens is not None:
            budget.max_input_tokens -= held.input_tokens
        if held.cost_usd is not None:
            budget.max_cost_usd -= held.cost_usd

    async def _not_judged(self, row: StudyQueryRow, reason: rank_pb2.CompletionReason) -> None:
        """End a query that gets no job (nothing left to spend, no time, a cancel). One judged
        before an extension keeps its previous job's labels and spend."""
        outcome = study_pb2.StudyQuery(query_id=row.query_id, pool_size=row.pool_size)
        carried = carried_outcome(row)
        if carried is not None:
            outcome.CopyFrom(carried)
            outcome.pool_size = row.pool_size
        outcome.state = rank_pb2.JOB_STATE_CANCELLED
        outcome.completion_reason = reason
        self._progress.add(outcome, had_job=False, row=row)
        await self._storage.finish_study_query(
            self._record.study_id,
            row.query_id,
            outcome.SerializeToString(),
            self._progress.to_bytes(),
        )

    def _assign(self, live: Sequence[rank_pb2.JobSpec]) -> rank_pb2.JobSpec | None:
        """The next query's share of what is left of the study's budget and time: what is
        left, less what the live queries may still spend, split evenly over the queries not
        started, and at least one call (or token) while any is left, so that a budget too
        small for every query pays for the first ones in topic order. None when a limit has
        nothing left for it."""
        assignment = rank_pb2.JobSpec()
        budget = self._spec.budget
        waiting = max(1, self._progress.progress.pending)
        left = self._progress.budget_left(budget, live)
        if budget.max_judge_calls:
            if left.max_judge_calls < 1:
                return None
            assignment.budget.max_judge_calls = max(1, left.max_judge_calls // waiting)
        if budget.max_input_tokens:
            if left.max_input_tokens < 1:
                return None
            assignment.budget.max_input_tokens = max(1, left.max_input_tokens // waiting)
        if budget.max_cost_usd:
            cost = left.max_cost_usd / waiting
            if cost <= 0:
                return None
            assignment.budget.max_cost_usd = cost
        if self._spec.deadline_seconds:
            remaining = self._record.start_time + self._spec.deadline_seconds - time.time()
            if remaining <= 0:
                return None
            assignment.deadline_seconds = remaining
        return assignment

    def _exhausted_reason(self) -> rank_pb2.CompletionReason:
        deadline = self._spec.deadline_seconds
        if deadline and time.time() >= self._record.start_time + deadline:
            return rank_pb2.COMPLETION_REASON_DEADLINE_EXCEEDED
        return rank_pb2.COMPLETION_REASON_BUDGET_EXHAUSTED

    async def _cancel(self, live: list[StudyQueryRow]) -> None:
        # No probe starts from now on; those in flight are answered and recorded.
        self._probing = False
        for row in live:
            record = await self._storage.get_job(self._record.tenant, row.job_id)
            if record is not None:
                await self._driver.manager.cancel(record)
            await self._ended(row)
        # The queries never started end too (an extension judges only what it adds); a job
        # still stopping keeps its query open, to be counted when it has ended.
        after = 0
        while waiting := await self._storage.study_queries(
            self._record.study_id, after, _CANCEL_PAGE, unfinished=True
        ):
            for row in waiting:
                if not row.job_id:
                    await self._not_judged(row, rank_pb2.COMPLETION_REASON_CANCELLED)
            after = waiting[-1].position
        if self._grading:
            with anyio.move_on_after(_PROBES_STOP_S):
                await self._graded.wait()
        await self._finish(study_pb2.STUDY_STATE_CANCELLED)

    async def _finish(self, state: int) -> None:
        with self._telemetry.step("tierank.study.end") as span:
            ended = dataclasses.replace(self._record, state=state)
            # The report holds the progress the study ends with.
            final = self._progress.to_bytes(final=True)
            progress = study_pb2.StudyProgress.FromString(final)
            report = await self._driver.build_report(ended, progress)
            error = ""
            if state == study_pb2.STUDY_STATE_SUCCEEDED:
                error = await self._unjudged(study_pb2.StudyReport.FromString(report))
                if error:
                    state = study_pb2.STUDY_STATE_FAILED
            name = study_pb2.StudyState.Name(state)
            span.set("tierank.study.state", name)
            code = NO_JUDGE_ANSWERED if error else 0
            if await self._storage.finish_study(
                self._record.study_id, state, final, report, error_code=code, error_message=error
            ):
                self._driver.went_on(self._record.study_id)
                metrics.study_ended(self._record.tenant, state)
                self._log.info("study ended", state=name, error=error or None)

    async def _unjudged(self, report: study_pb2.StudyReport) -> str:
        """Why a study that ran every query has no result worth the name: no judge answered
        any call of it, or its pointwise grader answered none of its probes ("" otherwise)."""
        # A query the deadline, the budget or a cancel cut short is provisional, not a failure.
        failed = sum(
            1
            for query in report.queries
            if query.job
            and (
                query.state == rank_pb2.JOB_STATE_FAILED
                or query.completion_reason == rank_pb2.COMPLETION_REASON_JUDGES_UNAVAILABLE
            )
        )
        if report.judged_queries == 0 and failed:
            return (
                f"no judge answered: none of the queries was judged, and the judges of {failed}"
                f" failed{await self._judges_failure()}; nothing is labelled"
            )
        probed = self._pointwise and report.cost.pointwise_calls
        if probed and not any(query.probes for query in report.queries):
            return (
                f"the pointwise grader answered none of its {report.cost.pointwise_calls}"
                " probes: the study has no grades"
            )
        return ""

    async def _judges_failure(self) -> str:
        """The reason the first query's judges gave for their last failed call, as a clause."""
        for row in await self._storage.study_queries(self._record.study_id, 0, 1):
            job_id = row.job_id or ""
            if not job_id:
                continue
            latest = await self._storage.latest_event(self._record.tenant, job_id, TIER_EVENT_KINDS)
            if latest is None:
                continue
            event = rank_pb2.JobEvent.FromString(latest.payload)
            stats = (event.completed if event.HasField("completed") else event.tiers_updated).stats
            for judge in stats.judges:
                if judge.last_error:
                    return f" (the last failure: {judge.last_error})"
        return ""


def _add_probes(
    outcome: study_pb2.StudyQuery, carried: study_pb2.StudyQuery | None, tally: ProbeTally
) -> None:
    """The query's probes and their spend in its outcome: its previous job's (a query judged
    again keeps what was graded of it) and this job's, within its calls and usage."""
    probes = {p.doc_id: p.grade for p in carried.probes} if carried is not None else {}
    probes.update(tally.grades)
    for doc, grade in probes.items():
        outcome.probes.add(doc_id=doc, grade=grade)
    new = usage_total(tally.usage)
    if carried is not None:
        outcome.pointwise_calls = carried.pointwise_calls
        outcome.pointwise_usage.CopyFrom(carried.pointwise_usage)
    outcome.pointwise_calls += tally.calls
    add_usage(outcome.pointwise_usage, new)
    outcome.judge_calls += outcome.pointwise_calls
    add_usage(outcome.usage, outcome.pointwise_usage)


def _add_spent(budget: rank_pb2.Budget, spent: study_pb2.StudyQuery) -> None:
    """`budget` raised, in each limit it sets, by what `spent` spent."""
    if budget.max_judge_calls:
        budget.max_judge_calls += spent.judge_calls
    if budget.max_input_tokens:
        budget.max_input_tokens += spent.usage.input_tokens
    if budget.max_cost_usd:
        budget.max_cost_usd += spent.usage.cost_usd


def query_job_spec(
    study: study_pb2.StudySpec, pool: bytes, assignment: rank_pb2.JobSpec
) -> rank_pb2.JobSpec:
    """A query's job: its pool, ranked as the study says (every judge in batch mode in a
    provider_batch study), with its share of budget and time."""
    spec = rank_pb2.JobSpec.FromString(pool)
    spec.MergeFrom(study.ranking)
    if study.provider_batch:
        in_batch_mode(spec)
    spec.budget.CopyFrom(assignment.budget)
    spec.deadline_seconds = assignment.deadline_seconds
    spec.top_k = min(spec.top_k, len(spec.candidates))
    return spec


def in_batch_mode(job: rank_pb2.JobSpec) -> None:
    """Every judge of `job` sends its calls to its provider's batch API."""
    for judge in job.judges:
        judge.parameters.options[MODE_OPTION] = BATCH_MODE
