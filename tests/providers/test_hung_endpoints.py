"""An endpoint that takes requests and never answers (issue 34, item 5): a call gives up at its
time limit, a job whose only judge never answers ends soon after, and a request that waits far
longer than its judge's calls usually take is reported, on the event stream and on `tierank
rank`'s progress.

Times are the defaults' divided by SCALE (minutes become seconds), so that the structure the
defaults promise (one call given up within 2 minutes, the job ended within 3) is shown in
seconds; what is asserted is counted (requests, calls, events), not timed."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import pytest
from conftest import StartAddress, StartServer
from fakes import MODELS, Answer, FakeLLMServer, Hang, LocalServer, Recorded, rank_by_score
from job_helpers import completed, llm_judge, run_job, scored_spec, tierank, verdicts

from tierank.server.judges.settings import provider_defaults
from tierank.v1 import rank_pb2

SCALE = 60.0
LOCAL = "openai-compatible"


def scaled_defaults(flavor: str) -> dict[str, Any]:
    """The provider's default settings with every time divided by SCALE, but the breaker's
    cool-down, which outlasts the rest of such a job at full scale too (30 s)."""
    defaults = provider_defaults(flavor)
    retry = defaults.retry
    return {
        "timeout_s": defaults.timeout_s / SCALE,
        "max_concurrency": defaults.max_concurrency,
        "retry": {
            "max_attempts": retry.max_attempts,
            "base_delay_s": retry.base_delay_s / SCALE,
            "max_delay_s": retry.max_delay_s / SCALE,
            "max_retry_after_s": retry.max_retry_after_s / SCALE,
            "max_elapsed_s": retry.max_elapsed_s / SCALE,
        },
        "breaker": {
            "failure_threshold": defaults.breaker.failure_threshold,
            "cooldown_s": defaults.breaker.cooldown_s,
        },
    }


def never_answers(request: Recorded) -> Hang:
    return Hang(60)  # released when the fake stops


@pytest.mark.parametrize(
    ("flavor", "requests_per_call"),
    [(LOCAL, 1), ("openai", 2)],
    ids=["local-server", "cloud-provider"],
)
async def test_a_job_whose_only_judge_never_answers_ends_after_one_call(
    fake_llm: FakeLLMServer, judged_server: StartServer, flavor: str, requests_per_call: int
) -> None:
    """A local server's first request gets the call's whole time (no retry would be answered
    sooner); a cloud provider's gets 60 s, and a retry what is left of 120 s. Either way the
    call fails within 2 minutes, and since the model answered nobody meanwhile the breaker
    opens at once: the calls queued behind it fail without a request, and the judge, dropped
    after 5 failures in a row, ends the job (JUDGES_UNAVAILABLE). Before, a local server's
    calls took 600 s x 4 attempts each, one after another, until 5 had failed."""
    if flavor == LOCAL:
        fake_llm.local = LocalServer(one_at_a_time=True)
    fake_llm.respond_with(flavor, never_answers)
    stub = await judged_server(**{flavor: scaled_defaults(flavor)})
    spec = scored_spec(12, [llm_judge(flavor, MODELS[flavor])], batch_size=4, max_in_flight=1)

    events = await run_job(stub, spec)

    done = completed(events)
    assert done.reason == rank_pb2.COMPLETION_REASON_JUDGES_UNAVAILABLE
    first, *refused = verdicts(events)
    assert first.failure_reason.startswith("timeout: no answer within")
    assert len(refused) >= 4
    assert all(
        v.failure_reason.startswith(
            "unavailable: circuit open after a request went unanswered for its whole time limit"
        )
        for v in refused
    )
    # Only the first call reached the endpoint, with at most its retry cut to the time left.
    assert 1 <= len(fake_llm.requests(flavor)) <= requests_per_call


def answers_then_hangs(hangs_at: int) -> Callable[[Recorded], Answer | Hang]:
    """Answers at once by score, but for request number `hangs_at` (from 1), never answered."""
    seen: list[Recorded] = []

    def respond(request: Recorded) -> Answer | Hang:
        seen.append(request)
        return never_answers(request) if len(seen) == hangs_at else rank_by_score(request)

    return respond


# A call's time limit in these tests: long enough for a busy machine's job loop (which looks
# for stalls at least every second) to see a request pass the stall point, a quarter of it.
LIMIT_S = 4.0
STALL_TEST_SETTINGS = {
    "timeout_s": LIMIT_S,
    "retry": {"max_attempts": 1, "max_elapsed_s": LIMIT_S},
    "breaker": {"failure_threshold": 5, "cooldown_s": 30.0},
}


async def test_a_request_far_slower_than_the_judges_median_is_reported_once(
    fake_llm: FakeLLMServer, judged_server: StartServer
) -> None:
    fake_llm.respond_with(LOCAL, answers_then_hangs(hangs_at=4))
    stub = await judged_server(**{LOCAL: STALL_TEST_SETTINGS})
    spec = scored_spec(12, [llm_judge(LOCAL)], batch_size=4, max_in_flight=1)

    events = await run_job(stub, spec)

    # Reported while the call waited, before the verdict that says it failed; once, though it
    # was looked at every second or so (an ordinary answer slowed past a second by a busy
    # machine could be reported too: at most one more).
    failed_at = next(i for i, e in enumerate(events) if e.HasField("verdict") and e.verdict.failed)
    assert events[failed_at].verdict.failure_reason.startswith("timeout:")
    stalls = [e.judge_stalled for e in events[:failed_at] if e.HasField("judge_stalled")]
    assert 1 <= len(stalls) <= 2, stalls
    stalled = stalls[-1]
    assert stalled.judge == f"{LOCAL}/any-name"
    assert stalled.time_limit_seconds == LIMIT_S
    # Its median is that of the calls answered before it (milliseconds each): the stall point
    # is then a quarter of the limit.
    assert stalled.HasField("median_latency_seconds")
    assert 0 < stalled.median_latency_seconds < LIMIT_S / 4 <= stalled.waiting_seconds


async def test_requests_stuck_together_are_reported_once(
    fake_llm: FakeLLMServer, judged_server: StartServer
) -> None:
    # Three calls at once, none ever answered: one warning for the judge, not one per request.
    fake_llm.respond_with("openai", never_answers)
    stub = await judged_server(openai=STALL_TEST_SETTINGS)
    spec = scored_spec(12, [llm_judge("openai", MODELS["openai"])], batch_size=4)

    events = await run_job(stub, spec)

    first_wave = [e.verdict for e in events if e.HasField("verdict")][:3]
    assert all(v.failure_reason.startswith("timeout:") for v in first_wave)
    assert len(fake_llm.requests("openai")) == 3
    stalls = [e for e in events if e.HasField("judge_stalled")]
    assert len(stalls) == 1, stalls
    assert not stalls[0].judge_stalled.HasField("median_latency_seconds")


async def test_rank_prints_the_stall_of_a_judge_that_never_answers(
    fake_llm: FakeLLMServer, judged_address: StartAddress, tmp_path: Path
) -> None:
    fake_llm.respond_with(LOCAL, never_answers)
    address = await judged_address(**{LOCAL: STALL_TEST_SETTINGS})
    pool = tmp_path / "pool.jsonl"
    lines = [json.dumps({"id": f"c{i}", "text": f"passage c{i} has score {i}."}) for i in range(8)]
    pool.write_text("\n".join(lines) + "\n")
    ranked = await tierank(
        "rank", str(pool), "--query", "q", "--judge", f"{LOCAL}:any-name", "--k", "4",
        "--max-in-flight", "1", "--server", address,
    )  # fmt: skip

    assert ranked.returncode == 3, ranked.stderr  # no judge answered at all
    (line,) = [line for line in ranked.stderr.splitlines() if " judge_stalled " in line]
    assert line.startswith("#")
    assert line.split(" ", 2)[2].startswith(f"{LOCAL}/any-name: a call has waited ")
    assert line.endswith(
        f"s without an answer (no answer from it yet in this job); it fails after {LIMIT_S:.0f}s"
    )


async def test_a_short_timeout_while_the_job_is_still_admitted_exits_as_timed_out(
    fake_llm: FakeLLMServer, judged_address: StartAddress, tmp_path: Path
) -> None:
    """A one-slot model server busy with another job's call answers its model list only when
    the slot is free, and admission waits for that list: a `--timeout` shorter than the wait
    ends the command as timed out (124), saying the job was never named, not with a bare gRPC
    DEADLINE_EXCEEDED and exit 1."""
    fake_llm.local = LocalServer(models=[{"id": "any-name", "object": "model"}])
    fake_llm.respond_with(LOCAL, never_answers)
    address = await judged_address(**{LOCAL: STALL_TEST_SETTINGS})
    pool = tmp_path / "pool.jsonl"
    lines = [json.dumps({"id": f"c{i}", "text": f"passage c{i} has score {i}."}) for i in range(8)]
    pool.write_text("\n".join(lines) + "\n")
    command = ("rank", str(pool), "--query", "q", "--judge", f"{LOCAL}:any-name", "--k", "4")
    async with anyio.create_task_group() as tasks:
        tasks.start_soon(tierank, *command, "--max-in-flight", "1", "--server", address)
        with anyio.fail_after(30):
            while not fake_llm.requests(LOCAL):  # the slot is taken by a call that hangs
                await anyio.sleep(0.05)
        timed_out = await tierank(*command, "--timeout", "1", "--server", address)

    assert timed_out.returncode == 124, timed_out.stderr
    assert timed_out.stderr.splitlines()[-1] == (
        f"tierank rank: stopped after --timeout 1s before the job was named; `tierank jobs` on"
        f" --server {address} lists it if it was created"
    )
