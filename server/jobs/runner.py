"""Runs one job: plans judge calls with the tournament, makes them, and records every step.

Durability: a plan is journaled before its calls start; each answer is stored (verdict, raw
answer, usage) the moment it arrives; answers are then applied to the tournament, journaled and
streamed in plan order. After a crash the tournament is rebuilt by replaying the journal (the
scheduler is deterministic); answers stored but not yet applied are applied from storage, so a
paid answer is never asked for again, and only calls that had no answer yet are made again. A
job that ends early (cancelled, deadline, no judges left) records the answers already received
before it completes.

A full disk pauses a job: every write is retried until it fits, so nothing already stored is
lost and the event sequence has no gap; the job goes on when space is freed. That holds for the
calls in flight too (their spend reservations and answers wait like the job's own records), so
an answer received while the disk is full is kept, not asked again, unless the server stops
before it could be stored: only then is that call made again when the job resumes.
"""

from __future__ import annotations

import contextlib
import enum
import math
import statistics
import time
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

import anyio
import structlog
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from google.rpc import code_pb2

from tierank.scheduler import PLANNER_VERSION, Tournament
from tierank.scheduler.types import Cost, JudgeCall, StopReason, Tier, TournamentConfig, Verdict
from tierank.server import metrics
from tierank.server.errors import (
    MAX_ERROR_TEXT_BYTES,
    LeaseLost,
    QuotaExceeded,
    StorageFull,
    StorageUnavailable,
    clip,
)
from tierank.server.jobs.hub import EventHub
from tierank.server.jobs.in_flight import CallsInFlight
from tierank.server.jobs.journal import decode_plan, decode_planner, encode_plan, encode_planner
from tierank.server.jobs.stats import StatsBook
from tierank.server.jobs.steps import StepThread
from tierank.server.judges.base import (
    BatchRequest,
    Judge,
    JudgeReply,
    JudgeUsage,
    Passage,
    PoolContext,
)
from tierank.server.names import job_name
from tierank.server.observability.jobs import JobTelemetry
from tierank.server.storage.base import (
    EventRow,
    JobStore,
    JobUpdate,
    JournalRow,
    Lease,
    VerdictAudit,
    VerdictCache,
)
from tierank.server.tenancy.paid_call import Answer, PaidCalls, call_seed
from tierank.server.tenancy.spending import SpendLedger
from tierank.server.wire.common import timestamp
from tierank.server.wire.jobs import tiers_to_proto
from tierank.server.wire.specs import tournament_config
from tierank.v1 import rank_pb2

# A judge failing this many times in a row inside one job is dropped from that job, so a
# judge that can never answer cannot keep the job rescheduling the same pairs. An open breaker
# counts as one failure like any other: one job's trouble with a provider, or a brief outage,
# must not drop the judge from every job at once.
MAX_CONSECUTIVE_FAILURES = 5

# A write that finds the disk full is retried after this long, doubling up to the maximum.
FULL_DISK_FIRST_RETRY_S = 0.05
FULL_DISK_MAX_RETRY_S = 2.0

# A judge's request in flight is reported stalled (a JudgeStalled event: `tierank rank` prints
# it as a warning) once it has waited STALL_MEDIANS times the judge's median latency in the
# job, and at least STALL_SHARE_OF_LIMIT of its call's time limit: well before the call gives
# up, yet not for a fast judge's merely slow answer. Before the judge's first answer in the job
# the share alone counts (an endpoint that never answers has no median).
STALL_MEDIANS = 5.0
STALL_SHARE_OF_LIMIT = 0.25
# While calls are outstanding whose requests are not sent yet (waiting for a slot), the job
# looks this often for requests that have been sent since, and might stall.
STALL_LOOK_S = 1.0

# A job lists its tiers (a Bradley–Terry fit, the tiers placed, an event naming every tier) at
# most this often, and always when it ends: with fast judges a job records many plans a second,
# and listing after each one was a third of the server's work (bench/README.md, section 2).
# Watchers and GetJob see tiers at most this much older than the votes.
TIERS_UPDATE_INTERVAL_S = 0.25

_Written = TypeVar("_Written")

_REASONS = {
    StopReason.SETTLED: rank_pb2.COMPLETION_REASON_SETTLED,
    StopReason.BUDGET_EXHAUSTED: rank_pb2.COMPLETION_REASON_BUDGET_EXHAUSTED,
    StopReason.JUDGES_UNAVAILABLE: rank_pb2.COMPLETION_REASON_JUDGES_UNAVAILABLE,
    StopReason.EXHAUSTED: rank_pb2.COMPLETION_REASON_EXHAUSTED,
    StopReason.POSITION_BIASED: rank_pb2.COMPLETION_REASON_POSITION_BIASED,
}
# The requested tiers are known (trusted or not): no more calls are planned.
_TARGET_REACHED = frozenset(
    {rank_pb2.COMPLETION_REASON_SETTLED, rank_pb2.COMPLETION_REASON_POSITION_BIASED}
)


class _Wake(enum.Enum):
    WAKE = enum.auto()


class _Diverged(Exception):
    """Replaying a journal planned differently than the recorded plan at entry `index`."""

    def __init__(self, index: int) -> None:
        super().__init__(f"journal replay diverged at entry {index}")
        self.index = index


@dataclass(frozen=True)
class _Answer:
    """A stored answer, waiting to be applied in plan order; `stored` is the verdict's bytes as
    stored, which its journal row repeats."""

    call: JudgeCall
    verdict: rank_pb2.VerdictReceived
    stored: bytes


@dataclass
class _Step:
    """What one pass of the job loop recorded and planned, stored in one commit."""

    events: list[rank_pb2.JobEvent] = field(default_factory=list)
    journal: list[JournalRow] = field(default_factory=list)
    to_start: list[JudgeCall] = field(default_factory=list)


def verdict_of(event: rank_pb2.VerdictReceived) -> Verdict:
    """The tournament's view of a verdict event; the one rule for live and replayed verdicts."""
    cost = (
        Cost()
        if event.cached
        else Cost(calls=1, input_tokens=event.usage.input_tokens, cost_usd=event.usage.cost_usd)
    )
    return Verdict(event.call_id, tuple(event.ordering), event.failed, cost)


class JobRunStore(JobStore, VerdictCache, Protocol):
    """What a job's run uses of storage: its own rows, and the verdict cache its calls read."""


class JobRunner:
    def __init__(
        self,
        *,
        job_id: str,
        tenant: str,
        spec: rank_pb2.JobSpec,
        pool: PoolContext,
        judges: Sequence[Judge],
        storage: JobRunStore,
        hub: EventHub,
        spending: SpendLedger,
        steps: StepThread,
        in_flight: CallsInFlight,
        last_sequence: int,
        create_time: float,
        trace_context: str = "",
    ) -> None:
        """`in_flight`: where the job's calls run, so that they outlive a lost lease."""
        self.job_id = job_id
        self.name = job_name(job_id)
        self._tenant = tenant
        self._spec = spec
        self._judges = list(judges)
        self._storage = storage
        self._hub = hub
        self._steps = steps
        # Set when the tenant's daily budget refuses a call: the job ends BUDGET_EXHAUSTED.
        self._over_budget: QuotaExceeded | None = None
        self._sequence = last_sequence
        # The last sequence known to be stored: a failure event follows it, never a gap.
        self._stored_sequence = last_sequence
        self._create_time = create_time
        self._pool = {p.id: p for p in pool.passages}
        self._deadline = create_time + spec.deadline_seconds if spec.deadline_seconds else None
        self._log = structlog.get_logger().bind(job_id=job_id, tenant=tenant)
        self._paid = PaidCalls(storage, spending, tenant, durably=self._durably, log=self._log)
        self._in_flight = in_flight
        self._lease_lost = False
        self.trace_context = trace_context  # the manager's lines about the job carry its trace
        self._telemetry = JobTelemetry(job_id, tenant, trace_context)
        self._wake: MemoryObjectSendStream[_Answer | _Wake] | None = None
        self._cancel_requested = False
        self._draining = False
        # The tournament plans only right after a record, so plans depend on answers, not timing.
        self._plan_due = True
        self.finished = anyio.Event()
        self._lease: Lease | None = None
        self._abandoned = anyio.CancelScope()
        # Votes recorded since the tiers were last listed, and when they may be listed next.
        self._tiers_stale = False
        self._tiers_due = 0.0
        # Per judge, when its last JudgeStalled event was recorded (time.monotonic()): the
        # requests it had in flight then are not reported again, only those sent later.
        self._stalls_reported: dict[int, float] = {}

    # -- control from the job manager ---------------------------------------------------

    def request_cancel(self) -> None:
        self._cancel_requested = True
        self._nudge()

    async def discard(self) -> None:
        """Release the runner: at the end of its run, or instead of one (its job was not
        stored)."""
        self.finished.set()
        for judge in self._judges:
            await judge.aclose()

    def request_drain(self) -> None:
        """Stop planning; return once the calls in flight are recorded. The job stays open."""
        self._draining = True
        self._nudge()

    def _nudge(self) -> None:
        # A loop that has already ended (closing its stream) is finishing; nothing to wake.
        if self._wake is not None:
            with contextlib.suppress(anyio.BrokenResourceError):
                self._wake.send_nowait(_Wake.WAKE)

    # -- the job ------------------------------------------------------------------------

    def abandon(self) -> None:
        """Stop at once without writing anything more: another replica runs the job now. The
        calls in flight go on (CallsInFlight): should this server claim the job back, they
        are not asked again."""
        self._lease_lost = True
        self._abandoned.cancel()

    async def run(self, lease: Lease) -> None:
        """Run the job under `lease` to its end, or until the lease is lost; never raises,
        whatever happens to this job (a storage or programming error fails this job only, and
        the server goes on)."""
        self._lease = lease
        metrics.ACTIVE_JOBS.labels(self._tenant).inc()
        try:
            with self._abandoned, self._telemetry.running(lease.epoch):
                await self._run()
        except Exception as error:
            if _holds(error, LeaseLost):
                self._log.warning("job taken over by another replica", error=str(error))
                return
            if _holds(error, StorageUnavailable):
                # Not the job's fault: it stays unfinished, and runs on (from its journal, here
                # or elsewhere) once the database is back and its lease is free.
                self._log.warning("job paused: the database is unreachable", error=str(error))
                return
            self._log.exception("job failed")
            try:
                await self._fail(f"{type(error).__name__}: {error}")
            except Exception:
                # Storage cannot even take the failure: the job stays unfinished, and the next
                # start resumes it (or fails it with a clear error).
                self._log.exception("could not record the job's failure")
        finally:
            metrics.ACTIVE_JOBS.labels(self._tenant).dec()
            await self.discard()

    async def _run(self) -> None:
        tournament, stats, groups, arrived = await self._restore()
        self._tiers = await self._steps.run(self._tenant, tournament.tiers)
        await self._store(JobUpdate(state=rank_pb2.JOB_STATE_RUNNING))
        unanswered = [c for g in groups for c in g if c.call_id not in arrived]
        self._log.info("job running", resumed_calls=len(unanswered), stored_answers=len(arrived))
        send, receive = anyio.create_memory_object_stream[_Answer | _Wake](math.inf)
        self._wake = send
        reason: rank_pb2.CompletionReason | None = None
        order = deque(groups)  # plans whose answers are not all recorded yet
        # The stream closes only after the task group has exited (its calls done or cancelled),
        # so no call ever answers into a closed stream.
        async with receive:
            async with anyio.create_task_group() as calls:
                if not self._cancel_requested:
                    with self._telemetry.wave([c.call_id for c in unanswered], resumed=True):
                        for call in unanswered:
                            calls.start_soon(self._ask, call, send, True)
                while not self._cancel_requested:
                    step = _Step()

                    def advance(step: _Step = step) -> rank_pb2.CompletionReason | None:
                        reason = self._advance(tournament, stats, order, arrived, step)
                        self._list_tiers(tournament, stats, step)
                        return reason

                    reason = await self._steps.run(self._tenant, advance)
                    await self._commit_step(step)
                    with self._telemetry.wave([c.call_id for c in step.to_start]):
                        for call in step.to_start:
                            calls.start_soon(self._ask, call, send)
                    if reason is not None:
                        break
                    if self._draining and not self._lands_soon(order, arrived):
                        # Only calls that wait hours for a provider batch, if any: they are
                        # journaled, and the job resumed waits for them again, unpaid.
                        await self._take_step(tournament, stats, now=True)
                        calls.cancel_scope.cancel()
                        return
                    if not tournament.in_flight:
                        # Asked again now that planning has estimated the calls: a budget too
                        # small for even one call is BUDGET_EXHAUSTED, not EXHAUSTED.
                        reason = _REASONS[tournament.stop_reason() or StopReason.EXHAUSTED]
                        break
                    await self._await_answers(receive, tournament, stats, arrived)
                # Cancelled, past the deadline or out of judges: the calls in flight are abandoned.
                calls.cancel_scope.cancel()
            stopped = tournament.stop_reason()
            if reason is None and stopped is not None and _REASONS[stopped] in _TARGET_REACHED:
                reason = _REASONS[stopped]  # it settled before the cancel reached it
            await self._keep_answers(tournament, stats, order, arrived, receive)
        # The loop ends with no reason only on a cancel.
        final = rank_pb2.COMPLETION_REASON_CANCELLED if reason is None else reason
        await self._finish(tournament, stats, final)

    async def _await_answers(
        self,
        receive: MemoryObjectReceiveStream[_Answer | _Wake],
        tournament: Tournament,
        stats: StatsBook,
        arrived: dict[str, _Answer],
    ) -> None:
        """Wait for answers (or a nudge) until the deadline or until stale tiers are due,
        recording a JudgeStalled event whenever a request in flight passes its stall point."""
        while True:
            limit, look = self._wait_limit(), math.inf
            if any(call_id not in arrived for call_id in tournament.in_flight):
                step = _Step()
                look = self._look_for_stalls(stats, arrived, step)
                await self._commit_step(step)
            with anyio.move_on_after(min(limit, look)):
                for item in await _drain(receive):
                    if isinstance(item, _Answer):
                        arrived[item.call.call_id] = item
                return
            if look >= limit:
                return

    def _look_for_stalls(self, stats: StatsBook, arrived: dict[str, _Answer], step: _Step) -> float:
        """Add a JudgeStalled event to `step` for each judge whose longest-waiting request has
        passed its stall point, unless it was in flight when the judge was last reported (one
        event covers the requests stuck together); returns how soon to look again (a request
        sent meanwhile is looked for after STALL_LOOK_S)."""
        now = time.monotonic()
        look = STALL_LOOK_S
        for index, judge in enumerate(self._judges):
            waiting = judge.waiting()
            if waiting is None or waiting.since <= self._stalls_reported.get(index, -math.inf):
                continue
            # No stall before the limit's share: the median (a sort) is not needed until then.
            earliest = waiting.since + stall_after_s(None, waiting.time_limit_s)
            median = None if now < earliest else self._median_latency(index, stats, arrived)
            stalled_at = max(earliest, waiting.since + stall_after_s(median, waiting.time_limit_s))
            if now < stalled_at:
                look = min(look, stalled_at - now)
                continue
            self._stalls_reported[index] = now
            stalled = rank_pb2.JudgeStalled(
                judge=judge.name,
                waiting_seconds=now - waiting.since,
                median_latency_seconds=median,
                time_limit_seconds=waiting.time_limit_s,
            )
            self._log.warning(
                "judge call stalled",
                judge=judge.name,
                waiting_s=round(stalled.waiting_seconds, 1),
                median_latency_s=median,
                time_limit_s=waiting.time_limit_s,
            )
            step.events.append(self._event(judge_stalled=stalled))
        return look

    def _median_latency(
        self, judge: int, stats: StatsBook, arrived: dict[str, _Answer]
    ) -> float | None:
        """The median latency of the judge's answered calls: those recorded, and those that
        arrived and wait for their plan's other answers."""
        latencies = stats.latencies(judge) + [
            answer.verdict.usage.latency_seconds
            for answer in arrived.values()
            if answer.call.judge == judge and not (answer.verdict.failed or answer.verdict.cached)
        ]
        return statistics.median(latencies) if latencies else None

    def _lands_soon(self, order: deque[list[JudgeCall]], arrived: dict[str, _Answer]) -> bool:
        """Whether a call in flight may still be answered within a drain's grace."""
        return any(
            call.call_id not in arrived and self._judges[call.judge].answers_promptly
            for group in order
            for call in group
        )

    def _stop_reason(self, tournament: Tournament) -> rank_pb2.CompletionReason | None:
        """Why the job must end now: the tournament's own reason, else its tenant's daily
        budget running out (BUDGET_EXHAUSTED) or its deadline passing (DEADLINE_EXCEEDED)."""
        stopped = tournament.stop_reason()
        if stopped is not None:
            return _REASONS[stopped]
        if self._over_budget is not None:
            return rank_pb2.COMPLETION_REASON_BUDGET_EXHAUSTED
        if self._deadline is not None and time.time() >= self._deadline:
            return rank_pb2.COMPLETION_REASON_DEADLINE_EXCEEDED
        return None

    def _time_left(self) -> float:
        return math.inf if self._deadline is None else max(0.0, self._deadline - time.time())

    def _wait_limit(self) -> float:
        """How long to wait for answers: until the deadline, or until stale tiers are due."""
        if not self._tiers_stale:
            return self._time_left()
        return min(self._time_left(), max(0.0, self._tiers_due - time.monotonic()))

    # -- replay -------------------------------------------------------------------------

    async def _restore(
        self,
    ) -> tuple[Tournament, StatsBook, list[list[JudgeCall]], dict[str, _Answer]]:
        """Replay the journal; returns the plans not yet wholly applied, and the answers to
        their calls that were stored but not applied before the restart.

        The tournament is rebuilt with the config the job was planned with (journals from
        before that was recorded: today's). A journal planned by this planner version replays
        exactly: every plan is made again and must match the recorded one. One planned by
        another version (a rolling upgrade), or one that does not match anyway, is resumed
        from its recorded calls instead, never re-planned: no answer is asked for twice, and
        planning goes on under today's rules from there. So is a job that continues another
        job's tournament over a larger pool (journal.continued_journal).
        """
        rows = await self._storage.read_journal(self.job_id)
        self._journal_index = len(rows)
        planner = decode_planner(rows[0].payload) if rows and rows[0].kind == "planner" else None
        config = planner.config if planner else tournament_config(self._spec)
        exact = planner is None or (planner.version == PLANNER_VERSION and not planner.continues)
        try:
            tournament, stats, planned, groups = await self._steps.run(
                self._tenant, lambda: self._replay(rows, config, exact)
            )
        except _Diverged as diverged:
            self._log.warning("journal replay diverged: resuming its calls", entry=diverged.index)
            tournament, stats, planned, groups = await self._steps.run(
                self._tenant, lambda: self._replay(rows, config, exact=False)
            )
        unapplied = [[planned[i] for i in group if i in planned] for group in groups]
        stored = await self._storage.read_verdicts(self.job_id, list(planned))
        arrived = {
            call_id: _Answer(planned[call_id], rank_pb2.VerdictReceived.FromString(data), data)
            for call_id, data in stored.items()
        }
        return tournament, stats, [group for group in unapplied if group], arrived

    def _replay(
        self, rows: Sequence[JournalRow], config: TournamentConfig, exact: bool
    ) -> tuple[Tournament, StatsBook, dict[str, JudgeCall], list[list[str]]]:
        """Rebuild the tournament from `rows`: with `exact` by planning again (_Diverged where
        a plan differs from the recorded one), else by adopting the recorded calls. Returns
        the calls no verdict row answers, and each plan's call ids."""
        tournament = Tournament([c.id for c in self._spec.candidates], config)
        stats = StatsBook([j.name for j in self._judges], self._spec.judges)
        planned: dict[str, JudgeCall] = {}
        groups: list[list[str]] = []
        for row in rows:
            if row.kind == "plan":
                recorded = decode_plan(row.payload)
                if exact:
                    calls = tournament.plan(self._estimate)
                    if [c.call_id for c in calls] != recorded.call_ids or (
                        recorded.calls is not None and calls != recorded.calls
                    ):
                        raise _Diverged(row.index)
                elif recorded.calls is None:
                    raise RuntimeError(
                        f"journal replay diverged; plan entry {row.index} names no calls to resume"
                    )
                else:
                    calls = recorded.calls
                    tournament.adopt(calls, self._estimate)
                planned.update((c.call_id, c) for c in calls)
                groups.append([c.call_id for c in calls])
            elif row.kind == "verdict":
                event = rank_pb2.VerdictReceived.FromString(row.payload)
                tournament.record(verdict_of(event))
                stats.add(planned.pop(event.call_id).judge, event)
            elif row.kind == "disable":
                judge = int(row.payload)
                tournament.disable_judge(judge)
                stats.disable(judge)
        return tournament, stats, planned, groups

    # -- judge calls --------------------------------------------------------------------

    def _passages(self, call: JudgeCall) -> tuple[Passage, ...]:
        return tuple(self._pool[i] for i in call.presented)

    def _request(self, call: JudgeCall, resumed: bool = False) -> BatchRequest:
        deadline = None
        if self._deadline is not None:
            deadline = time.monotonic() + (self._deadline - time.time())
        return BatchRequest(
            call_id=call.call_id,
            query=self._spec.query,
            rubric=self._spec.rubric,
            passages=self._passages(call),
            seed=call_seed(self._spec.seed, call.call_id),
            deadline=deadline,
            resumed=resumed,
        )

    def _estimate(self, call: JudgeCall) -> Cost:
        usage = self._judges[call.judge].estimate(self._request(call))
        return Cost(calls=1, input_tokens=usage.input_tokens, cost_usd=usage.cost_usd)

    async def _keep_answers(
        self,
        tournament: Tournament,
        stats: StatsBook,
        order: deque[list[JudgeCall]],
        arrived: dict[str, _Answer],
        receive: MemoryObjectReceiveStream[_Answer | _Wake],
    ) -> None:
        """At an early end, record every answer already in (paid for), whole plan or not.

        Plan order no longer matters: nothing is planned after this. The calls left without an
        answer are counted as abandoned.
        """
        for item in _waiting(receive):
            if isinstance(item, _Answer):
                arrived[item.call.call_id] = item
        step = _Step()

        def record() -> None:
            for call in (call for group in order for call in group):
                answer = arrived.pop(call.call_id, None)
                if answer is None:
                    stats.abandon(call.judge)
                else:
                    self._record(tournament, stats, answer, step)
            order.clear()
            self._list_tiers(tournament, stats, step)

        await self._steps.run(self._tenant, record)
        await self._commit_step(step)

    async def _ask(
        self,
        call: JudgeCall,
        send: MemoryObjectSendStream[_Answer | _Wake],
        resumed: bool = False,
    ) -> None:
        """Ask `call` (`resumed`: planned before this run started) and hand its answer over."""

        async def keep(answer: Answer) -> None:
            """Store the answer as it arrives (its settlement and verdict-cache entry with it),
            then hand it over to be applied in plan order. Stored first, so that a crash before
            the answer's plan is whole never makes the job pay for it twice."""
            verdict = self._verdict_event(call, answer.reply, answer.cached)
            stored = verdict.SerializeToString()
            audit = VerdictAudit(call.call_id, stored, answer.reply.prompt, answer.reply.raw_text)
            settled = [answer.settlement] if answer.settlement is not None else []
            await self._store(JobUpdate(cache=answer.cache, audit=[audit], settlements=settled))
            # A runner that lost its lease as the answer was stored has stopped listening: the
            # answer is in the job's journal, for whichever run comes next.
            with contextlib.suppress(anyio.BrokenResourceError, anyio.ClosedResourceError):
                send.send_nowait(_Answer(call, verdict, stored))

        judge, request = self._judges[call.judge], self._request(call, resumed)
        try:
            await self._in_flight.ask(
                (self.job_id, call.call_id),
                lambda keep: self._paid.judge(judge, request, keep),
                keep,
                outlives=lambda: self._lease_lost,
            )
        except QuotaExceeded as exceeded:
            # Never sent, so never answered: the loop sees the budget gone and ends the job.
            self._log.info("tenant budget exhausted", limit=exceeded.limit, call_id=call.call_id)
            metrics.REJECTIONS.labels(self._tenant, exceeded.limit).inc()
            self._over_budget = exceeded
            self._nudge()

    # -- recording ----------------------------------------------------------------------

    def _event(self, **kind: Any) -> rank_pb2.JobEvent:
        self._sequence += 1
        return rank_pb2.JobEvent(
            job=self.name, sequence=self._sequence, time=timestamp(time.time()), **kind
        )

    def _journal(self, kind: str, payload: bytes) -> JournalRow:
        row = JournalRow(self._journal_index, kind, payload)
        self._journal_index += 1
        return row

    def _advance(
        self,
        tournament: Tournament,
        stats: StatsBook,
        order: deque[list[JudgeCall]],
        arrived: dict[str, _Answer],
        step: _Step,
    ) -> rank_pb2.CompletionReason | None:
        """Record the oldest plan's answers once all are in, plan again, and repeat.

        Answers are recorded a whole plan at a time and in plan order, never as they arrive, and
        the tournament plans only after a record: so the same seed and the same answers give the
        same calls and tiers however the judges' timing falls. (This is the wave model the
        ranking benchmark measures, and it keeps one standings update per plan, not per answer.)
        """
        while True:
            reason = self._stop_reason(tournament)
            # A settled target still waits for the calls in flight: they are paid for, and in
            # an ensemble the batch's other judges may overturn what the first one said.
            landing = reason in _TARGET_REACHED and bool(tournament.in_flight)
            if reason is not None and not landing:
                return reason
            if self._plan_due and not (self._draining or landing):
                planned = tournament.plan(self._estimate)
                if planned:
                    if self._journal_index == 0:  # a new job: what plans it comes first
                        header = encode_planner(PLANNER_VERSION, tournament.config)
                        step.journal.append(self._journal("planner", header))
                    step.journal.append(self._journal("plan", encode_plan(planned)))
                    step.to_start.extend(planned)
                    order.append(planned)
            self._plan_due = False
            if not order or any(call.call_id not in arrived for call in order[0]):
                return None
            for call in order.popleft():
                self._record(tournament, stats, arrived.pop(call.call_id), step)
            self._plan_due = True

    def _record(
        self, tournament: Tournament, stats: StatsBook, answer: _Answer, step: _Step
    ) -> None:
        call, verdict = answer.call, answer.verdict
        tournament.record(verdict_of(verdict))
        step.journal.append(self._journal("verdict", answer.stored))
        failures_in_a_row = stats.add(call.judge, verdict)
        if not stats.disabled(call.judge) and failures_in_a_row >= MAX_CONSECUTIVE_FAILURES:
            tournament.disable_judge(call.judge)
            stats.disable(call.judge)
            step.journal.append(self._journal("disable", str(call.judge).encode()))
            self._log.warning("judge dropped", judge=verdict.judge, reason=verdict.failure_reason)
        step.events.append(self._event(verdict=verdict))

    async def _take_step(self, tournament: Tournament, stats: StatsBook, now: bool) -> None:
        """A step that only lists the tiers, if they are due (`now`: whenever votes changed)."""
        step = _Step()
        await self._steps.run(self._tenant, lambda: self._list_tiers(tournament, stats, step, now))
        await self._commit_step(step)

    def _list_tiers(
        self, tournament: Tournament, stats: StatsBook, step: _Step, now: bool = False
    ) -> None:
        """Add the tiers to `step` when votes changed them and they are due (`now`: whenever
        votes changed)."""
        if step.journal:
            self._tiers_stale = True
        if self._tiers_stale and (now or time.monotonic() >= self._tiers_due):
            self._tiers_stale = False
            tiers = tournament.tiers()
            if tiers != self._tiers:
                self._tiers = tiers
                step.events.append(
                    self._event(tiers_updated=self._tiers_event(tournament, stats, tiers))
                )
                # From the event's own time stamp: watchers see updates that far apart at least.
                self._tiers_due = time.monotonic() + TIERS_UPDATE_INTERVAL_S

    async def _commit_step(self, step: _Step) -> None:
        """Store a step in one transaction, before its calls start or its events stream."""
        if step.journal or step.events:
            await self._commit(step.events, journal=step.journal)

    def _verdict_event(
        self, call: JudgeCall, reply: JudgeReply, cached: bool
    ) -> rank_pb2.VerdictReceived:
        usage = JudgeUsage() if cached else reply.usage
        config = self._judges[call.judge].config
        outcome = "cached" if cached else str(reply.failure.kind if reply.failure else "ok")
        self._telemetry.verdict(call.call_id, config.provider, config.model, outcome, usage)
        return rank_pb2.VerdictReceived(
            call_id=call.call_id,
            batch=call.batch,
            judge=self._judges[call.judge].name,
            presented=call.presented,
            ordering=reply.ordering,
            usage=rank_pb2.Usage(
                input_tokens=usage.input_tokens,
                output_tokens=usage.output_tokens,
                cached_input_tokens=usage.cached_input_tokens,
                cache_write_input_tokens=usage.cache_write_input_tokens,
                cost_usd=usage.cost_usd,
                latency_seconds=usage.latency_s,
            ),
            cached=cached,
            failed=reply.failed,
            failure_reason=clip(str(reply.failure), MAX_ERROR_TEXT_BYTES) if reply.failure else "",
        )

    def _tiers_event(
        self, tournament: Tournament, stats: StatsBook, tiers: list[Tier]
    ) -> rank_pb2.TiersUpdated:
        return rank_pb2.TiersUpdated(
            tiers=tiers_to_proto(tiers),
            settled_count=tournament.settled_count,
            total_count=tournament.total,
            stats=self._stats(tournament, stats, final=False),
        )

    def _stats(self, tournament: Tournament, stats: StatsBook, final: bool) -> rank_pb2.JobStats:
        # Agreement with the majority is only meaningful once voting is over, and costly to
        # recompute on every update, so progress updates leave it out.
        return stats.to_proto(
            critical_path=tournament.critical_path,
            position_bias=tournament.position_bias(),
            agreement=tournament.judge_agreement() if final else None,
            settled=tournament.settled_count,
            total=tournament.total,
            wall_seconds=time.time() - self._create_time,
            breakers_open=[judge.breaker_open for judge in self._judges],
        )

    async def _commit(self, events: list[rank_pb2.JobEvent], **update: object) -> None:
        rows = [
            EventRow(
                e.sequence,
                e.WhichOneof("kind"),
                e.time.ToNanoseconds() / 1e9,
                e.SerializeToString(),
            )
            for e in events
        ]
        await self._store(JobUpdate(events=rows, **update))  # type: ignore[arg-type]
        if events:
            self._stored_sequence = events[-1].sequence
        await self._hub.publish(self.job_id, events)

    async def _store(self, update: JobUpdate) -> None:
        """Commit `update`, waiting out a full disk (the job pauses; nothing is lost)."""
        try:
            await self._durably(lambda: self._storage.commit(self.job_id, update, self._lease))
        except LeaseLost:
            self._lease_lost = True  # the calls in flight outlive this run
            raise

    async def _durably(self, write: Callable[[], Awaitable[_Written]]) -> _Written:
        """Make one of the job's writes, retrying it until it fits on a full disk: the job's
        main loop and every call in flight pause alike, and go on when space is freed.

        Each attempt is shielded, so a cancellation never leaves it unknown whether a write
        went in; between attempts the job can be cancelled (a shutdown), and resumes later.
        """
        delay = FULL_DISK_FIRST_RETRY_S
        paused = False
        while True:
            try:
                with anyio.CancelScope(shield=True):
                    written = await write()
            except StorageFull as error:
                if not paused:
                    self._log.error("job paused until disk space is freed", error=str(error))
                    paused = True
                await anyio.sleep(delay)
                delay = min(2 * delay, FULL_DISK_MAX_RETRY_S)
                continue
            if paused:
                self._log.info("job resumed: disk space was freed")
            return written

    async def _finish(
        self, tournament: Tournament, stats: StatsBook, reason: rank_pb2.CompletionReason
    ) -> None:
        completed = await self._steps.run(
            self._tenant,
            lambda: rank_pb2.JobCompleted(
                tiers=tiers_to_proto(tournament.tiers(final=True)),
                stats=self._stats(tournament, stats, final=True),
                reason=reason,
            ),
        )
        cancelled = reason == rank_pb2.COMPLETION_REASON_CANCELLED
        state = rank_pb2.JOB_STATE_CANCELLED if cancelled else rank_pb2.JOB_STATE_SUCCEEDED
        await self._commit(
            [self._event(completed=completed)], state=state, completion_reason=reason
        )
        metrics.JOBS_FINISHED.labels(self._tenant, rank_pb2.CompletionReason.Name(reason)).inc()
        self._log.info(
            "job finished",
            reason=rank_pb2.CompletionReason.Name(reason),
            calls=completed.stats.judge_calls,
            critical_path=completed.stats.critical_path,
        )
        await self._withdraw_calls()

    async def _withdraw_calls(self) -> None:
        """The job has ended: judges that handed its calls to a provider for later (batch
        mode) may tell it to stop the ones still unanswered."""
        for judge in self._judges:
            try:
                await judge.withdraw()
            except Exception:  # the job has ended either way; its batches end on their own
                self._log.exception("cannot withdraw the job's calls", judge=judge.name)

    async def _fail(self, message: str) -> None:
        # Events numbered but never stored (their commit failed) are numbered again.
        self._sequence = self._stored_sequence
        message = clip(message, MAX_ERROR_TEXT_BYTES)
        error = rank_pb2.JobError(code=code_pb2.INTERNAL, message=message)
        await self._commit(
            [self._event(failed=rank_pb2.JobFailed(error=error))],
            state=rank_pb2.JOB_STATE_FAILED,
            error_code=error.code,
            error_message=message,
        )
        await self._withdraw_calls()


def stall_after_s(median_s: float | None, time_limit_s: float) -> float:
    """How long a judge's request may wait before it is reported stalled (see STALL_MEDIANS)."""
    floor = STALL_SHARE_OF_LIMIT * time_limit_s
    return floor if median_s is None else max(STALL_MEDIANS * median_s, floor)


def _holds(error: BaseException, kind: type[Exception]) -> bool:
    """Whether `error` is, or (from the task group of calls) holds, an error of `kind`."""
    if isinstance(error, BaseExceptionGroup):
        return error.subgroup(kind) is not None
    return isinstance(error, kind)


async def _drain(receive: MemoryObjectReceiveStream[_Answer | _Wake]) -> list[_Answer | _Wake]:
    """Wait for one item, then take every item already waiting, so they are stored together."""
    return [await receive.receive(), *_waiting(receive)]


def _waiting(receive: MemoryObjectReceiveStream[_Answer | _Wake]) -> list[_Answer | _Wake]:
    """The items already in the stream, without waiting."""
    items = []
    while True:
        try:
            items.append(receive.receive_nowait())
        except anyio.WouldBlock:
            return items
