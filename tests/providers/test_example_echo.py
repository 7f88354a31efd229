"""A judge that echoes the prompt's example, whole or in part, states no vote (issue 22 item 14)."""

from __future__ import annotations

import re

import pytest
from conftest import StartServer
from fakes import Answer, FakeLLMServer, Recorded, Responder
from job_helpers import completed, llm_judge, run_job, scored_spec, verdicts

from tierank.v1 import rank_pb2

# The example as the instruction writes it: bracketed items joined by " > ".
_EXAMPLE = re.compile(r"in the form (\[[^\]]+\](?: > \[[^\]]+\])+)")
_SHOWN = re.compile(r"^\[(\d+)\] ", re.MULTILINE)


def echo_part_of_the_example(request: Recorded) -> Answer:
    """What a small model answered: the example's beginning, with a passage number of the batch
    where the example has an item the batch lacks (`[2] > [4] > [1]` at k=3)."""
    example = _EXAMPLE.search(request.messages[-1][1]) or _EXAMPLE.search(request.prompt)
    assert example is not None, request.prompt
    items = example.group(1).split(" > ")
    return Answer(" > ".join([*items[:2], "[1]"]))


def stray_number(request: Recorded) -> Answer:
    """A ranking of the shown passages with one passage that was never shown."""
    shown = [int(n) for n in _SHOWN.findall(request.prompt)]
    return Answer(" > ".join(f"[{n}]" for n in [shown[-1], len(shown) + 1, *shown[:-1]]))


@pytest.mark.parametrize("responder", [echo_part_of_the_example, stray_number])
async def test_a_judge_echoing_the_example_adds_no_vote_to_a_job(
    responder: Responder, fake_llm: FakeLLMServer, judged_server: StartServer
) -> None:
    fake_llm.respond_with("openai-compatible", responder)
    stub = await judged_server()
    judge = llm_judge("openai-compatible", options={"format": "text"})
    events = await run_job(stub, scored_spec(6, [judge], batch_size=3, max_in_flight=1))

    done = completed(events)
    answered = verdicts(events)
    assert answered
    # Every answer was unreadable, after its one corrective follow-up: no ordering, no vote.
    assert all(v.failed and not v.ordering for v in answered)
    assert all(v.failure_reason.startswith("unparseable:") for v in answered)
    assert done.reason == rank_pb2.COMPLETION_REASON_JUDGES_UNAVAILABLE
    assert not any(tier.settled for tier in done.tiers)
