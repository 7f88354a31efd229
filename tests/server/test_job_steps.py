"""Jobs' CPU steps on their own thread (server/jobs/steps.py): off the event loop, one tenant
after another, each step whole even for a caller that is cancelled."""

from __future__ import annotations

import contextvars
import sys
import threading
import time

import anyio
import pytest

from tierank.server.jobs.steps import (
    LOCK_SWITCH_INTERVAL_S,
    SHARED_LOCK_SWITCH_INTERVAL_S,
    TENANTS_TOGETHER_S,
    StepThread,
    TenantActivity,
)

_request_id: contextvars.ContextVar[str] = contextvars.ContextVar("request_id", default="")


async def test_steps_run_off_the_loop_with_the_callers_context_and_errors():
    async with StepThread() as steps:
        _request_id.set("r-1")
        thread, seen = await steps.run(
            "acme", lambda: (threading.current_thread(), _request_id.get())
        )
        assert thread is not threading.current_thread() and seen == "r-1"

        def broken() -> None:
            raise ValueError("a step's own error")

        with pytest.raises(ValueError, match="a step's own error"):
            await steps.run("acme", broken)
        assert await steps.run("acme", lambda: 42) == 42  # the thread lives on


async def test_a_tenant_with_one_job_waits_for_one_step_of_a_busy_tenant_not_all():
    order: list[str] = []
    gate = threading.Event()

    def step(name: str) -> None:
        if name == "busy-0":
            gate.wait(10)  # the busy tenant's first step holds the thread while the rest queue
        order.append(name)

    async with StepThread() as steps, anyio.create_task_group() as group:
        group.start_soon(steps.run, "busy", lambda: step("busy-0"))
        await anyio.sleep(0.05)
        for i in range(1, 20):
            group.start_soon(steps.run, "busy", lambda i=i: step(f"busy-{i}"))
        await anyio.sleep(0.05)
        group.start_soon(steps.run, "quiet", lambda: step("quiet"))
        await anyio.sleep(0.05)
        gate.set()
    assert order[:3] == ["busy-0", "busy-1", "quiet"], order
    assert sorted(order) == sorted(["quiet", *(f"busy-{i}" for i in range(20))])


async def test_a_cancelled_caller_still_waits_for_its_step_to_end():
    ended: list[float] = []

    def slow() -> None:
        time.sleep(0.3)
        ended.append(time.monotonic())

    async with StepThread() as steps:
        with anyio.move_on_after(0.05):
            await steps.run("acme", slow)
        # The job's state was the step's until it ended: its caller came back only after.
        assert ended and ended[0] <= time.monotonic()


async def test_the_loop_serves_other_work_while_a_step_runs():
    ticks = 0

    async def tick() -> None:
        nonlocal ticks
        while True:
            await anyio.sleep(0.005)
            ticks += 1

    def busy() -> None:
        until = time.monotonic() + 0.5
        while time.monotonic() < until:  # pure CPU, holding the interpreter lock when it can
            sum(range(1000))

    async with StepThread() as steps, anyio.create_task_group() as group:
        group.start_soon(tick)
        await steps.run("acme", busy)
        group.cancel_scope.cancel()
    # 0.5 s of CPU on the loop's thread would have let no tick run until it ended.
    assert ticks >= 10


async def test_the_lock_changes_hands_more_often_while_several_tenants_call():
    activity = TenantActivity()
    async with StepThread(activity) as steps:
        activity.saw("acme")
        activity.saw("acme")
        alone = await steps.run("acme", sys.getswitchinterval)
        activity.saw("globex")
        together = await steps.run("acme", sys.getswitchinterval)
        # Calls more than TENANTS_TOGETHER_S apart are not together.
        activity.together_until = time.monotonic() - 0.01
        apart = await steps.run("acme", sys.getswitchinterval)
    assert alone == apart == pytest.approx(LOCK_SWITCH_INTERVAL_S)
    assert together == pytest.approx(SHARED_LOCK_SWITCH_INTERVAL_S)
    assert together < alone


def test_tenants_count_as_together_only_within_the_window_of_each_others_calls():
    activity = TenantActivity()
    activity.saw("acme")
    assert activity.together_until == 0.0  # one tenant alone
    before = time.monotonic()
    activity.saw("globex")
    # Together for TENANTS_TOGETHER_S after acme's call, the earlier of the two.
    assert before - 0.5 < activity.together_until - TENANTS_TOGETHER_S <= before
    first = activity.together_until
    activity.saw("globex")  # the same tenant again changes nothing
    assert activity.together_until == first


async def test_two_tenants_jobs_stepping_count_as_together_without_any_call():
    async with StepThread(TenantActivity()) as steps:
        await steps.run("acme", sys.getswitchinterval)
        together = await steps.run("globex", sys.getswitchinterval)
    assert together == pytest.approx(SHARED_LOCK_SWITCH_INTERVAL_S)
