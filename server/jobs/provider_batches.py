"""Batch mode: the calls of judges whose spec says `mode=batch` travel in provider batches
(OpenAI Batch, Anthropic Message Batches, Gemini batch mode), about half the price, answered
within the vendor's window (usually under an hour) instead of seconds.

A job sees an ordinary Judge (`BatchedJudge`): it asks one call and waits for its reply, so the
paid call (reservation, settlement, verdict cache, the answer stored before it is applied) is
the same as call by call. Underneath, one `BatchDesk` per server process:

- gathers the calls that live jobs ask into one wave per (tenant, account, judge, owner), the
  owner being the jobs' study (names.batch_owner): the wave is closed once no call has come for
  `gather_s` (every live job plans its next calls within moments of the last answers), or after
  `max_gather_s`; it is cut into payloads within the vendor's limits;
- journals each payload (ProviderBatchJournal: the batch and which job's call each custom id
  carries) before submitting it, and its vendor id after. A call asked again after a restart,
  kill -9 or failover finds its batch there and waits for it: it is never submitted (nor
  paid) twice. A batch journaled without a vendor id (cut off mid-submission) is looked for
  among the vendor's batches (`find_submitted`) before its calls are asked anew;
- follows each batch some job here waits on: the replica holding the batch's poll lease asks
  the vendor (backoff with jitter) and records its status and counts; the others read what it
  recorded. Once ended, each process reads the results of the calls its own jobs wait for;
- a call whose batch expired, or was cancelled by someone else, goes into a later batch (up to
  `max_tries` batches), then fails like a timed-out call; a failed request is a failed reply
  (no votes), never an invented answer;
- when a job ends (cancelled with its study, or for any other reason) it withdraws its calls;
  a batch none of whose calls is wanted any more is cancelled at the vendor, and followed
  until it ends (what it answered before is billed, and the journal says so).
"""

from __future__ import annotations

import functools
import json
import random
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import anyio
import structlog
from anyio.abc import TaskGroup

from tierank.server import metrics
from tierank.server.judges.base import (
    BatchRequest,
    FailureKind,
    Judge,
    JudgeFailure,
    JudgeReply,
    JudgeUsage,
)
from tierank.server.judges.batches import transport_for
from tierank.server.judges.batches.base import (
    BatchCall,
    BatchCallFailure,
    BatchFailureKind,
    BatchOutcome,
    BatchPhase,
    BatchTransport,
    poll_delay,
    poll_once,
)
from tierank.server.judges.llm import LLMJudge
from tierank.server.judges.retry import RETRYABLE, CallError
from tierank.server.judges.settings import BatchSettings
from tierank.server.names import new_sortable_id
from tierank.server.storage.base import (
    BatchState,
    ProviderBatchCall,
    ProviderBatchJournal,
    ProviderBatchRecord,
)

log = structlog.get_logger()

# What the vendors call a request's failure that asking again may cure.
_TRANSIENT_ERROR_TYPES = frozenset(
    {"api_error", "overloaded_error", "rate_limit_error", "server_error", "429", "500", "503"}
)
_FAILURE_KINDS = frozenset(kind.value for kind in FailureKind)
_PHASE_STATE = {
    BatchPhase.OPEN: BatchState.OPEN,
    BatchPhase.ENDED: BatchState.ENDED,
    BatchPhase.FAILED: BatchState.FAILED,
}


@dataclass(eq=False)
class _Waiter:
    """One job's call waiting for its batch."""

    job_id: str
    request: BatchRequest
    done: anyio.Event = field(default_factory=anyio.Event)
    outcome: BatchOutcome | None = None
    gone: bool = False  # its job stopped waiting (cancelled, shut down)

    def settle(self, outcome: BatchOutcome) -> None:
        if not self.done.is_set():
            self.outcome = outcome
            self.done.set()


@dataclass(frozen=True)
class _Scope:
    """Whose calls a BatchedJudge asks, and the wave they join: one per (tenant, account,
    judge, owner)."""

    tenant: str
    owner: str
    job_id: str
    transport: BatchTransport[Any]

    @functools.cached_property
    def wave(self) -> tuple[object, ...]:
        judge = self.transport.judge
        return (self.tenant, id(judge.shared), judge.cache_identity(), self.owner)


@dataclass(eq=False)
class _Wave:
    """Calls gathered for one (tenant, account, judge, owner) until the wave closes."""

    tenant: str
    owner: str
    transport: BatchTransport[Any]
    waiters: list[_Waiter] = field(default_factory=list)
    first: float = field(default_factory=time.monotonic)
    last: float = field(default_factory=time.monotonic)


# How often a batch cancelled here is polled until the vendor has ended it (at most).
CANCELLED_POLL_S = 2.0


@dataclass(eq=False)
class _Follow:
    """A batch that jobs here wait on, by custom id; followed by one task."""

    transport: BatchTransport[Any]
    waiters: dict[str, _Waiter] = field(default_factory=dict)
    # A cancelled batch is followed until it ends even with nobody waiting, so that the
    # journal records how it ended.
    to_the_end: bool = False
    # Set to poll now (the batch was just cancelled), not at the end of its backoff.
    poll_now: anyio.Event = field(default_factory=anyio.Event)


class BatchDesk:
    """Provider batches for one server process (see the module docstring)."""

    def __init__(
        self, journal: ProviderBatchJournal, replica_id: str, settings: BatchSettings
    ) -> None:
        self._journal = journal
        self._replica_id = replica_id
        self.settings = settings
        self._waves: dict[tuple[object, ...], _Wave] = {}
        self._follows: dict[str, _Follow] = {}
        self._tasks: TaskGroup | None = None
        # Jitter only; seeded per replica so that replicas started together poll apart.
        self._rng = random.Random(replica_id)

    async def run(self) -> None:
        """Own the desk's tasks (waves closing, batches followed) until cancelled."""
        async with anyio.create_task_group() as tasks:
            self._tasks = tasks
            try:
                await anyio.sleep_forever()
            finally:
                self._tasks = None

    # -- what a BatchedJudge asks ---------------------------------------------------------

    async def ask(self, scope: _Scope, request: BatchRequest, resume: bool) -> BatchOutcome:
        """The outcome of `request` in a provider batch. `resume`: look in the journal first
        for a batch that carries the call already (it was asked before a restart)."""
        waiter = _Waiter(scope.job_id, request)
        try:
            found = None
            if resume:
                found = await self._journal.batch_of_call(scope.job_id, request.call_id)
            if found is not None and found[0].state is not BatchState.FAILED:
                record, custom_id = found
                self._wait_on(record.batch_id, scope.transport, {custom_id: waiter})
            else:
                self._gather(scope, waiter)
            await waiter.done.wait()
            assert waiter.outcome is not None
            return waiter.outcome
        finally:
            waiter.gone = True

    async def withdraw(self, job_id: str, transport: BatchTransport[Any]) -> None:
        """The job has ended: its calls are no longer wanted. Each batch of `transport`'s
        provider and model none of whose calls is wanted any more is cancelled at the vendor
        (its answers so far are billed and kept by the vendor)."""
        unwanted = await self._journal.withdraw_batch_calls(job_id)
        for record in unwanted:
            if (record.provider, record.model) != (
                transport.provider,
                transport.judge.config.model,
            ):
                continue
            if not record.vendor_id:
                continue  # its submitter cancels it once it has the vendor's id
            await self._cancel(record, transport)

    # -- waves ----------------------------------------------------------------------------

    def _gather(self, scope: _Scope, waiter: _Waiter) -> None:
        wave = self._waves.get(scope.wave)
        if wave is None:
            wave = self._waves[scope.wave] = _Wave(scope.tenant, scope.owner, scope.transport)
            self._start(self._close_wave, scope.wave, wave)
        wave.waiters.append(waiter)
        wave.last = time.monotonic()

    async def _close_wave(self, key: tuple[object, ...], wave: _Wave) -> None:
        settings = self.settings
        while True:
            now = time.monotonic()
            quiet_left = wave.last + settings.gather_s - now
            open_left = wave.first + settings.max_gather_s - now
            if quiet_left <= 0 or open_left <= 0:
                break
            await anyio.sleep(min(quiet_left, open_left))
        del self._waves[key]
        waiting = [w for w in wave.waiters if not w.gone]
        try:
            await self._submit(wave, waiting)
        except Exception as error:  # a bug or the database: these calls fail, others go on
            log.exception("cannot submit a provider batch", owner=wave.owner)
            message = f"batch not submitted: {error}"
            self._fail(waiting, FailureKind.SERVER_ERROR, message)

    async def _submit(self, wave: _Wave, waiting: list[_Waiter]) -> None:
        transport = wave.transport
        calls: list[BatchCall] = []
        by_custom_id: dict[str, _Waiter] = {}
        for n, waiter in enumerate(waiting):
            call = BatchCall(f"c{n}", waiter.request)
            calls.append(call)
            by_custom_id[call.custom_id] = waiter
        # Renders every prompt to size the payloads: not on the event loop.
        payloads, too_large = await anyio.to_thread.run_sync(_cut, transport, calls)
        for call, error in too_large:
            failure = BatchCallFailure(BatchFailureKind.ERRORED, "too_large", str(error))
            by_custom_id[call.custom_id].settle(failure)
        for payload in payloads:
            await self._submit_until_taken(wave, transport, payload, by_custom_id)

    async def _submit_until_taken(
        self,
        wave: _Wave,
        transport: BatchTransport[Any],
        payload: Sequence[BatchCall],
        by_custom_id: dict[str, _Waiter],
    ) -> None:
        """Submit `payload`; a creation the vendor refuses with a 429, a 5xx or a timeout (and
        does not have) is submitted again with the polls' backoff (at least its Retry-After)
        for up to submit_retry_s, each try a batch journaled anew; then its calls fail with
        the vendor's message (a job whose only judge this is then ends, and says why)."""
        settings = self.settings
        started = time.monotonic()
        attempt = 0
        while True:
            refused = await self._submit_payload(wave, transport, payload, by_custom_id)
            if refused is None:
                return
            wait = max(poll_delay(attempt, settings, self._rng), refused.retry_after_s or 0.0)
            attempt += 1
            waiters = [by_custom_id[call.custom_id] for call in payload]
            if all(w.gone for w in waiters):
                return  # nobody waits for these calls any more
            if time.monotonic() - started + wait > settings.submit_retry_s:
                self._fail(
                    waiters,
                    refused.kind,
                    f"the vendor refused the batch {attempt} times over"
                    f" {time.monotonic() - started:.0f} s: {refused.message}",
                )
                return
            log.info(
                "provider batch refused, submitted again later",
                provider=transport.provider,
                wait_s=round(wait, 1),
                error=refused.message,
            )
            await anyio.sleep(wait)

    async def _submit_payload(
        self,
        wave: _Wave,
        transport: BatchTransport[Any],
        payload: Sequence[BatchCall],
        by_custom_id: dict[str, _Waiter],
    ) -> CallError | None:
        """Journal and submit one batch; the vendor's refusal when it may take it later (a
        429, a 5xx, a timeout, and it does not have the batch), else None (submitted and
        followed, or its calls failed)."""
        judge = transport.judge
        record = ProviderBatchRecord(
            batch_id=new_sortable_id(),
            tenant=wave.tenant,
            owner=wave.owner,
            provider=transport.provider,
            model=judge.config.model,
            calls=len(payload),
            create_time=time.time(),
        )
        carried = [
            ProviderBatchCall(
                record.batch_id,
                call.custom_id,
                by_custom_id[call.custom_id].job_id,
                call.request.call_id,
            )
            for call in payload
        ]
        waiters = {call.custom_id: by_custom_id[call.custom_id] for call in payload}
        try:
            await self._journal.journal_batch(record, carried)
        except Exception as error:  # nothing was sent: the calls fail, and may be planned again
            self._fail(
                waiters.values(), FailureKind.SERVER_ERROR, f"cannot journal the batch: {error}"
            )
            return None
        batch_log = log.bind(batch=record.batch_id, provider=record.provider, calls=len(payload))
        try:
            vendor_id = await transport.submit(payload, record.batch_id)
        except CallError as error:
            # The vendor may have made the batch before the answer was lost (a timeout).
            try:
                found = await self._look_up(record, transport)
            except CallError as unknown:
                # Whether the vendor has it cannot be told now: it stays SUBMITTING, and its
                # follower looks again once submit_grace_s has passed.
                batch_log.warning("provider batch submission unknown", error=unknown.message)
                self._wait_on(record.batch_id, transport, waiters)
                return None
            if found is None:
                batch_log.warning("provider batch not submitted", error=error.message)
                await self._journal.batch_not_submitted(
                    record.batch_id, f"not submitted: {error.message}"
                )
                if error.kind in RETRYABLE:  # a 429, 5xx or timeout: submitted again later
                    return error
                self._fail(waiters.values(), error.kind, f"batch not submitted: {error.message}")
                return None
            vendor_id = found
        await self._journal.batch_submitted(record.batch_id, vendor_id)
        metrics.PROVIDER_BATCHES.labels(record.provider, "submitted").inc()
        batch_log.info("provider batch submitted", vendor_id=vendor_id)
        self._wait_on(record.batch_id, transport, waiters)
        return None

    @staticmethod
    def _fail(waiters: Iterable[_Waiter], kind: FailureKind, message: str) -> None:
        for waiter in waiters:
            waiter.settle(BatchCallFailure(BatchFailureKind.ERRORED, str(kind), message))

    async def _look_up(
        self, record: ProviderBatchRecord, transport: BatchTransport[Any]
    ) -> str | None:
        """The vendor id of `record`'s batch if the vendor has it, looked for among its own
        batches; None where it has not. Raises CallError when the vendor cannot say now."""
        known = {
            other.vendor_id
            for other in await self._journal.owner_batches(record.tenant, record.owner)
            if other.vendor_id
        }
        return await transport.find_submitted(
            record.batch_id, record.create_time, record.calls, known
        )

    # -- following batches ------------------------------------------------------------------

    def _wait_on(
        self, batch_id: str, transport: BatchTransport[Any], waiters: dict[str, _Waiter]
    ) -> None:
        follow = self._follows.get(batch_id)
        if follow is None:
            follow = self._follows[batch_id] = _Follow(transport)
            self._start(self._follow, batch_id, follow)
        follow.waiters.update(waiters)

    def _start(self, task: Any, *args: object) -> None:
        if self._tasks is None:
            raise RuntimeError("the batch desk is not running")
        self._tasks.start_soon(task, *args)

    async def _follow(self, batch_id: str, follow: _Follow) -> None:
        try:
            await self._follow_until_ended(batch_id, follow)
        except Exception as error:  # a bug or the database: these calls fail, others go on
            log.exception("cannot follow a provider batch", batch=batch_id)
            self._fail(follow.waiters.values(), FailureKind.SERVER_ERROR, f"batch lost: {error}")
        finally:
            del self._follows[batch_id]

    async def _follow_until_ended(self, batch_id: str, follow: _Follow) -> None:
        settings, transport = self.settings, follow.transport
        attempt = 0
        cancelled = False
        while True:
            if not follow.to_the_end and all(w.gone for w in follow.waiters.values()):
                return  # nobody here waits any more (the jobs went to another replica, or ended)
            record = await self._journal.get_provider_batch(batch_id)
            if record is None:
                raise RuntimeError("its journal entry is gone")
            wait = settings.first_poll_s
            if record.state is BatchState.SUBMITTING:
                if time.time() - record.create_time >= settings.submit_grace_s:
                    await self._resolve_submitting(record, transport)
                    record = await self._journal.get_provider_batch(batch_id) or record
            elif record.state is BatchState.OPEN and await self._journal.take_batch_poll(
                batch_id, self._replica_id, settings.poll_lease_s
            ):
                status, wait = await poll_once(
                    transport, record.vendor_id, attempt, settings, self._rng
                )
                attempt += 1
                if cancelled:  # the vendor ends a cancelled batch within seconds to minutes
                    wait = min(wait, CANCELLED_POLL_S)
                # Held until past this replica's next poll: another replica takes the polling
                # over only from one that stopped.
                await self._journal.take_batch_poll(
                    batch_id, self._replica_id, wait + settings.poll_lease_s
                )
                if status is not None:
                    state = _PHASE_STATE[status.phase]
                    if state is not BatchState.OPEN:
                        metrics.PROVIDER_BATCHES.labels(record.provider, status.phase.value).inc()
                    counts = json.dumps(dict(status.counts), sort_keys=True)
                    await self._journal.batch_status(
                        batch_id, state, status.vendor_status, counts, status.message
                    )
                    record = replace(record, state=state)
            if record.state is BatchState.ENDED:
                await self._deliver(record, follow)
                return
            if record.state is BatchState.FAILED:
                failure = (
                    BatchCallFailure(BatchFailureKind.ERRORED, "batch_failed", record.message)
                    if record.vendor_id
                    # Never reached the vendor: nothing was run, so its calls are asked anew.
                    else BatchCallFailure(
                        BatchFailureKind.CANCELLED, "not_submitted", record.message
                    )
                )
                for waiter in follow.waiters.values():
                    waiter.settle(failure)
                return
            with anyio.move_on_after(wait):
                await follow.poll_now.wait()
            if follow.poll_now.is_set():
                follow.poll_now = anyio.Event()
                cancelled = True

    async def _resolve_submitting(
        self, record: ProviderBatchRecord, transport: BatchTransport[Any]
    ) -> None:
        """Record whether a batch cut off mid-submission reached the vendor: its vendor id,
        or FAILED (its calls are then asked anew). Nothing when the vendor cannot say now."""
        try:
            vendor_id = await self._look_up(record, transport)
        except CallError as error:
            log.warning(
                "cannot look for a provider batch", batch=record.batch_id, error=error.message
            )
            return
        if vendor_id is not None:
            await self._journal.batch_submitted(record.batch_id, vendor_id)
        else:
            await self._journal.batch_not_submitted(
                record.batch_id, "cut off before the vendor had it: its calls are asked anew"
            )

    async def _deliver(self, record: ProviderBatchRecord, follow: _Follow) -> None:
        """Read the results of the calls waited for here; again for any waiter that came
        while they were read (a job resumed meanwhile)."""
        while waiting := {
            cid: w for cid, w in follow.waiters.items() if not (w.gone or w.done.is_set())
        }:
            calls = [BatchCall(cid, w.request) for cid, w in waiting.items()]
            outcomes = await follow.transport.results(record.vendor_id, calls)
            for custom_id, waiter in waiting.items():
                outcome = outcomes[custom_id]
                kind = "answered" if isinstance(outcome, JudgeReply) else outcome.kind.value
                metrics.PROVIDER_BATCH_CALLS.labels(record.provider, kind).inc()
                waiter.settle(outcome)

    async def _cancel(self, record: ProviderBatchRecord, transport: BatchTransport[Any]) -> None:
        try:
            await transport.cancel(record.vendor_id)
        except CallError as error:  # ended meanwhile, or the vendor is away: it ends anyway
            log.warning(
                "cannot cancel a provider batch", batch=record.batch_id, error=error.message
            )
            return
        log.info("provider batch cancelled", batch=record.batch_id, vendor_id=record.vendor_id)
        metrics.PROVIDER_BATCHES.labels(record.provider, "cancelled").inc()
        follow = self._follows.get(record.batch_id)
        if follow is None:
            follow = self._follows[record.batch_id] = _Follow(transport, to_the_end=True)
            self._start(self._follow, record.batch_id, follow)
        follow.to_the_end = True
        # Polled now and often until it ends, so that what GetStudy shows of it is the
        # vendor's word of a moment ago, not of the last poll of its backoff (minutes).
        follow.poll_now.set()


def _cut(
    transport: BatchTransport[Any], calls: list[BatchCall]
) -> tuple[list[list[BatchCall]], list[tuple[BatchCall, ValueError]]]:
    """`calls` cut into payloads, less the calls no batch can carry (each with why)."""
    try:
        return transport.payloads(calls), []
    except ValueError:
        fitting, too_large = [], []
        for call in calls:
            try:
                transport.payloads([call])
            except ValueError as error:
                too_large.append((call, error))
            else:
                fitting.append(call)
        return transport.payloads(fitting), too_large


class BatchedJudge(Judge):
    """An LLM judge in batch mode, for one job: its calls go through the desk. Everything
    else (name, identity, qualifications) is the judge's own; its estimate is at the batch
    price."""

    def __init__(
        self, judge: LLMJudge, desk: BatchDesk, tenant: str, owner: str, job_id: str
    ) -> None:
        super().__init__(judge.config)
        self._judge = judge
        self._desk = desk
        self._transport = transport_for(judge)
        self._scope = _Scope(tenant, owner, job_id, self._transport)

    @property
    def cacheable(self) -> bool:
        return self._judge.cacheable

    def cache_identity(self) -> str:
        return self._judge.cache_identity()

    def judge_identity(self) -> str:
        return self._judge.judge_identity()

    def qualification_identities(self) -> list[str]:
        return self._judge.qualification_identities()

    async def prepare(self, *, patient: bool = False) -> None:
        await self._judge.prepare(patient=patient)

    @property
    def identity_doubt(self) -> str | None:
        return self._judge.identity_doubt

    def estimate(self, request: BatchRequest) -> JudgeUsage:
        return self._judge.estimate_at(request, self._transport.price)

    @property
    def answers_promptly(self) -> bool:
        return False

    async def judge(self, request: BatchRequest) -> JudgeReply:
        tries = self._desk.settings.max_tries
        outcome: BatchOutcome | None = None
        started = time.monotonic()
        for attempt in range(tries):
            # Only a call planned before the job last started can be in a batch already.
            outcome = await self._desk.ask(self._scope, request, request.resumed and attempt == 0)
            if isinstance(outcome, JudgeReply):
                # The call's latency is its wait for the batch's answer (since this process
                # asked: a call resumed after a restart counts from its resumption).
                waited = replace(outcome.usage, latency_s=time.monotonic() - started)
                return replace(outcome, usage=waited)
            if outcome.kind is BatchFailureKind.ERRORED:
                break
        assert isinstance(outcome, BatchCallFailure)
        return JudgeReply((), failure=_judge_failure(outcome, tries))

    async def withdraw(self) -> None:
        await self._desk.withdraw(self._scope.job_id, self._transport)

    async def aclose(self) -> None:
        await self._judge.aclose()


def _judge_failure(failure: BatchCallFailure, tries: int) -> JudgeFailure:
    if failure.kind is BatchFailureKind.ERRORED:
        if failure.error_type in _FAILURE_KINDS:  # ours: the batch could not be sent or read
            kind = FailureKind(failure.error_type)
        elif failure.error_type in _TRANSIENT_ERROR_TYPES:
            kind = FailureKind.SERVER_ERROR
        else:
            kind = FailureKind.CLIENT_ERROR
        return JudgeFailure(kind, f"provider batch: {failure}")
    return JudgeFailure(FailureKind.TIMEOUT, f"provider batch, {tries} tries: {failure}")
