"""Jobs' CPU-heavy steps on a thread of their own, taken round-robin by tenant.

A job's steps (recording answers, planning the next calls, listing tiers, replaying a journal,
the final fit) are pure CPU. On the event loop they queue with every RPC of every tenant: when
one tenant's hundred jobs step at once, another tenant's GetJob waits behind all of them, once
for each of the several loop iterations a call takes, and the loop, saturated, makes every
wait longer. Here they run on one thread beside the loop, so the loop keeps serving RPCs while
they run: the interpreter hands the lock between the two threads at least every switch
interval (sys.setswitchinterval), which bounds what a waiting RPC pays for each loop iteration.
Steps are taken one tenant after another, so a tenant with one job gets as many steps as one
with a hundred. A job still takes its steps one at a time and in order, so a job's outcome is
what it was: only where its CPU work runs changes.

How often the lock is handed over is a trade: each hand-over costs both threads some work, and
each wait for it is paid by the RPC waiting. While one tenant alone uses the server (its calls
and its jobs' steps), its steps and its RPCs are its own business, and the lock changes hands
at most every millisecond; while several tenants use it, every fifth of a millisecond, so that
one tenant's steps delay another's calls less (bench/README.md, section 9, measures both).
"""

from __future__ import annotations

import asyncio
import contextvars
import sys
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass
from types import TracebackType
from typing import Any, TypeVar

import anyio

_Result = TypeVar("_Result")

# While steps run, the event loop's thread waits at most about this long for the interpreter
# lock each time it wants it back (once per loop iteration, and an RPC takes several): the
# interpreter's default, 5 ms, made a waiting RPC's median many times its time alone
# (bench/README.md, section 9). SHARED_: while several tenants use the server.
LOCK_SWITCH_INTERVAL_S = 0.001
SHARED_LOCK_SWITCH_INTERVAL_S = 0.0002
# Tenants count as using the server together while their calls and steps are at most this
# far apart.
TENANTS_TOGETHER_S = 1.0


class TenantActivity:
    """Whether several tenants use the server now: told on the event loop of each call's tenant
    and each job step's, read by the step thread. Keeps the last two tenants it was told of (a
    server with thousands of tenants costs no more per call), and publishes one float, which
    the step thread reads without a lock."""

    def __init__(self) -> None:
        self._last: tuple[str, float] | None = None
        # Until when the two latest distinct tenants count as together.
        self.together_until = 0.0

    def saw(self, tenant: str) -> None:
        now = time.monotonic()
        last = self._last
        if last is not None and last[0] != tenant:
            self.together_until = last[1] + TENANTS_TOGETHER_S
        self._last = (tenant, now)


@dataclass
class _Step:
    context: contextvars.Context
    work: Callable[[], Any]
    done: asyncio.Future[Any]
    loop: asyncio.AbstractEventLoop


class StepThread:
    """One thread that runs submitted steps, the next tenant's first; used as a context
    manager around everything that submits steps."""

    def __init__(self, activity: TenantActivity | None = None) -> None:
        """`activity`: which tenants use the server (the RPC edge tells it of calls, this of
        steps), for the lock's hand-over interval."""
        self._activity = activity or TenantActivity()
        self._lock = threading.Lock()
        self._waiting = threading.Condition(self._lock)
        # Tenants with steps waiting, in the order their next step comes round.
        self._queues: OrderedDict[str, deque[_Step]] = OrderedDict()
        self._stopping = False
        self._switch_interval = sys.getswitchinterval()  # restored on the way out
        self._interval = self._switch_interval  # the one set now
        self._thread = threading.Thread(target=self._serve, name="tierank-job-steps", daemon=True)

    async def __aenter__(self) -> StepThread:
        self._interval = min(self._switch_interval, LOCK_SWITCH_INTERVAL_S)
        sys.setswitchinterval(self._interval)
        self._thread.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        with self._lock:
            self._stopping = True
            self._waiting.notify()
        await anyio.to_thread.run_sync(self._thread.join)
        sys.setswitchinterval(self._switch_interval)

    async def run(self, tenant: str, work: Callable[[], _Result]) -> _Result:
        """`work()` on the step thread, in `tenant`'s turn. A step once submitted is waited
        for even by a cancelled caller: the job's state is its step's until the step ends."""
        self._activity.saw(tenant)  # a tenant whose jobs step is calling the server too
        loop = asyncio.get_running_loop()
        # In the caller's context: its log fields and its trace span go with the step.
        step = _Step(contextvars.copy_context(), work, loop.create_future(), loop)
        with self._lock:
            if self._stopping:
                raise RuntimeError("the job step thread has stopped")
            self._queues.setdefault(tenant, deque()).append(step)
            self._waiting.notify()
        with anyio.CancelScope(shield=True):
            result: _Result = await step.done
        return result

    def _serve(self) -> None:
        while True:
            with self._lock:
                while not self._queues and not self._stopping:
                    self._waiting.wait()
                if not self._queues:
                    return
                tenant, steps = next(iter(self._queues.items()))
                step = steps.popleft()
                if steps:
                    self._queues.move_to_end(tenant)  # its next step comes after the others'
                else:
                    del self._queues[tenant]
            self._pace()
            try:
                outcome = (True, step.context.run(step.work))
            except BaseException as error:  # delivered to the job that submitted the step
                outcome = (False, error)
            step.loop.call_soon_threadsafe(_deliver, step.done, outcome)

    def _pace(self) -> None:
        """The lock's hand-over interval for the next step: shorter while several tenants
        call the server."""
        together = time.monotonic() < self._activity.together_until
        interval = min(
            self._switch_interval,
            SHARED_LOCK_SWITCH_INTERVAL_S if together else LOCK_SWITCH_INTERVAL_S,
        )
        if interval != self._interval:
            self._interval = interval
            sys.setswitchinterval(interval)


def _deliver(done: asyncio.Future[Any], outcome: tuple[bool, Any]) -> None:
    if done.cancelled():
        return
    ok, value = outcome
    if ok:
        done.set_result(value)
    else:
        done.set_exception(value)
