"""Judge calls of this server's jobs, kept apart from the runners that ask them, so that a
call paid for is not asked twice when a job's lease is lost and claimed back.

A runner that loses its job's lease stops at once; the calls it had in flight go on here, keyed
by job and call id. Plans are journaled before their calls start, so a later run of the job
asks exactly those calls again: when this server claims the job back, its new runner takes up
each one (it waits for a call still in flight, or takes the answer that landed meanwhile) and
stores it as its own, rather than paying for it again. An answer that lands with nobody to take
it is settled against the tenant's spend and put in the verdict cache at once, so that a replica
that claimed the job meanwhile finds it there if it asks later. A call nobody takes up within
`adopt_within_s` is dropped (one still in flight is cancelled and settled at its reservation, as
any abandoned call). Calls of a replica that was killed die with it: whoever resumes its jobs
asks them again (docs/operations.md).

Any other end of a runner (a cancel, a deadline, a shutdown) cancels its calls as before.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import anyio
from anyio.abc import TaskGroup

from tierank.server.errors import LeaseLost
from tierank.server.storage.base import VerdictCache
from tierank.server.tenancy.paid_call import Answer, Keep, settle_and_cache
from tierank.server.tenancy.spending import SpendLedger

# A job's call, as the paid call layer asks it: given where to keep the answer.
PaidCall = Callable[[Keep], Awaitable[object]]
CallKey = tuple[str, str]  # (job id, call id)


@dataclass(eq=False)
class _Waiter:
    """A runner waiting for a call: where it keeps the answer, and how its wait ended."""

    keep: Keep
    done: anyio.Event = field(default_factory=anyio.Event)
    error: Exception | None = None  # raised to the runner (QuotaExceeded, LeaseLost, ...)


@dataclass(eq=False)
class _Call:
    waiter: _Waiter | None  # None while nobody waits (its runner lost the lease)
    finished: anyio.Event = field(default_factory=anyio.Event)
    scope: anyio.CancelScope = field(default_factory=anyio.CancelScope)
    parked: Answer | None = None  # landed with nobody waiting: settled, cached, to be taken up
    orphaned: int = 0  # how many times a runner left it: each time starts one expiry timer


class CallsInFlight:
    def __init__(
        self,
        storage: VerdictCache,
        spending: SpendLedger,
        adopt_within_s: float,
        tasks: TaskGroup,
    ) -> None:
        """`tasks`: the job manager's, where its runners run too: a shutdown cancels the calls
        lost leases left with them (each settled at its reservation)."""
        self._storage = storage
        self._spending = spending
        self._adopt_within_s = adopt_within_s
        self._calls: dict[CallKey, _Call] = {}
        self._tasks = tasks

    async def ask(
        self, key: CallKey, paid: PaidCall, keep: Keep, outlives: Callable[[], bool]
    ) -> None:
        """Ask `paid` (or take up the call of `key` a runner of the job left here), with its
        answer kept by `keep`. Cancelled while it waits: the call goes on if `outlives()` (the
        runner lost its lease), else it is cancelled and waited for, its writes made."""
        call = self._calls.get(key)
        if call is not None and call.parked is not None:
            del self._calls[key]
            await keep(call.parked)
            return
        waiter = _Waiter(keep)
        if call is None:
            call = self._calls[key] = _Call(waiter)
            self._tasks.start_soon(self._run, key, call, paid, name=f"call {key[1]}")
        else:
            call.waiter = waiter
        try:
            await waiter.done.wait()
        except anyio.get_cancelled_exc_class():
            if call.waiter is waiter and outlives():
                self._orphan(key, call)
            elif call.waiter is waiter:
                call.scope.cancel()
                with anyio.CancelScope(shield=True):
                    await call.finished.wait()
            raise
        if waiter.error is not None:
            raise waiter.error

    async def _run(self, key: CallKey, call: _Call, paid: PaidCall) -> None:
        error: Exception | None = None
        try:
            with call.scope:
                try:
                    await paid(lambda answer: self._keep(key, call, answer))
                except Exception as raised:
                    error = raised
        finally:  # a shutdown cancels this task too, and the runner waiting for it is told
            if call.parked is None and self._calls.get(key) is call:
                del self._calls[key]
            call.finished.set()
            if call.waiter is not None:
                call.waiter.error = error
                call.waiter.done.set()

    async def _keep(self, key: CallKey, call: _Call, answer: Answer) -> None:
        waiter = call.waiter
        if waiter is not None:
            try:
                await waiter.keep(answer)
                return
            except LeaseLost as lost:  # lost as the answer landed: the runner is told
                waiter.error = lost
                waiter.done.set()
                self._orphan(key, call)
        await settle_and_cache(self._spending, self._storage, answer.settlement, answer.cache)
        # Taken up as a paid answer (its usage counts in the job's stats), already settled.
        call.parked = Answer(answer.reply, answer.cached, (), None)

    def _orphan(self, key: CallKey, call: _Call) -> None:
        call.waiter = None
        call.orphaned += 1
        self._tasks.start_soon(self._expire, key, call, call.orphaned)

    async def _expire(self, key: CallKey, call: _Call, orphaned: int) -> None:
        await anyio.sleep(self._adopt_within_s)
        if call.waiter is None and call.orphaned == orphaned and self._calls.get(key) is call:
            del self._calls[key]
            call.scope.cancel()
