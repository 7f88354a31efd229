"""An endpoint that takes requests and never answers (issue 34, item 5): a call gives up at its
time limit, and a job whose only judge never answers ends soon after.

Times are the defaults' divided by SCALE (minutes become seconds), so that the structure the
defaults promise (one call given up within 2 minutes, the job ended within 3) is shown in
seconds; what is asserted is counted (requests, calls, events), not timed."""

from __future__ import annotations

from typing import Any

import pytest
from conftest import StartServer
from fakes import MODELS, FakeLLMServer, Hang, LocalServer, Recorded
from job_helpers import completed, llm_judge, run_job, scored_spec, verdicts

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
