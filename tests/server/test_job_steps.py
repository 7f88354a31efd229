"""Jobs' CPU steps on their own thread (server/jobs/steps.py): off the event loop, one tenant
after another, each step whole even for a caller that is cancelled."""

from __future__ import annotations

import contextvars
import threading
import time

import anyio
import pytest

from tierank.server.jobs.steps import StepThread

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
