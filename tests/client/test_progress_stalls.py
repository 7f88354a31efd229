"""The stall warning of `tierank rank`'s live display (issue 34, item 5): a `judge_stalled`
event shows a line whose wait counts on until the judge's next verdict. (The plain lines of a
pipe, and the server that sends the event, are tested in tests/providers/test_hung_endpoints.py.)"""

from __future__ import annotations

import io

from rich.console import Console

from tierank.client._progress import LiveProgress
from tierank.v1 import rank_pb2

JUDGE = "openai-compatible/qwen"


def shown(progress: LiveProgress) -> str:
    out = io.StringIO()
    Console(file=out, width=200, force_terminal=False).print(progress)
    return out.getvalue()


def test_a_stall_is_shown_until_the_judges_next_verdict() -> None:
    progress = LiveProgress(Console(file=io.StringIO(), force_terminal=False))
    stalled = rank_pb2.JudgeStalled(
        judge=JUDGE, waiting_seconds=31, median_latency_seconds=2.5, time_limit_seconds=120
    )
    progress.on_event(rank_pb2.JobEvent(sequence=2, judge_stalled=stalled))

    (line,) = [line for line in shown(progress).splitlines() if line.startswith("stalled: ")]
    assert line.startswith(f"stalled: {JUDGE}: a call has waited 3")  # 31s and counting
    assert line.endswith("without an answer (its median call took 2.5s); it fails after 120s")

    other = rank_pb2.VerdictReceived(judge="lexical", failed=True)
    progress.on_event(rank_pb2.JobEvent(sequence=3, verdict=other))
    assert "stalled: " in shown(progress)
    answered = rank_pb2.VerdictReceived(judge=JUDGE, failed=True)
    progress.on_event(rank_pb2.JobEvent(sequence=4, verdict=answered))
    assert "stalled: " not in shown(progress)
