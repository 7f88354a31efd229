"""A judge that follows the positions it is shown is caught during the job, without labels,
and its votes alone never make a job settled (issue 22 item 15)."""

from __future__ import annotations

import json
import re

from conftest import StartAddress, StartServer
from fakes import Answer, FakeLLMServer, Recorded, rank_by_score
from job_helpers import completed, judge_stats, llm_judge, run_job, scored_spec, tierank

from tierank.v1 import rank_pb2

_SHOWN = re.compile(r"^\[(\d+)\] ", re.MULTILINE)
JUDGE = "openai-compatible/any-name"


def reverses_shown(request: Recorded) -> Answer:
    """What Qwen2.5-Coder-1.5B answered to nearly every call: the shown order reversed."""
    shown = [int(n) for n in _SHOWN.findall(request.prompt)]
    return Answer(" > ".join(f"[{n}]" for n in reversed(shown)))


async def test_a_judge_reversing_the_shown_order_leaves_the_job_provisional(
    fake_llm: FakeLLMServer, judged_server: StartServer
) -> None:
    fake_llm.respond_with("openai-compatible", reverses_shown)
    stub = await judged_server()
    spec = scored_spec(30, [llm_judge("openai-compatible")], batch_size=5, top_k=5)
    events = await run_job(stub, spec)

    done = completed(events)
    assert done.reason == rank_pb2.COMPLETION_REASON_POSITION_BIASED
    bias = judge_stats(done, JUDGE).position_bias
    assert bias.biased and bias.mean_tau == -1.0 and bias.z < -3.89
    assert bias.verdicts == done.stats.judge_calls
    assert not any(tier.settled for tier in done.tiers)
    assert done.stats.settled_count == 0
    # Progress updates carry the flag as soon as it is raised.
    updates = [e.tiers_updated for e in events if e.HasField("tiers_updated")]
    assert any(judge_stats(u, JUDGE).position_bias.biased for u in updates)


async def test_an_honest_judge_settles_as_before(
    fake_llm: FakeLLMServer, judged_server: StartServer
) -> None:
    fake_llm.respond_with("openai-compatible", rank_by_score)
    stub = await judged_server()
    spec = scored_spec(30, [llm_judge("openai-compatible")], batch_size=5, top_k=5)
    events = await run_job(stub, spec)

    done = completed(events)
    assert done.reason == rank_pb2.COMPLETION_REASON_SETTLED
    bias = judge_stats(done, JUDGE).position_bias
    assert not bias.biased and bias.verdicts == done.stats.judge_calls
    assert abs(bias.mean_tau) < 0.25
    assert [t.candidate_ids[0] for t in done.tiers[:5]] == [f"c{i:03d}" for i in range(5)]


async def test_rank_reports_the_bias_and_exits_provisional(
    fake_llm: FakeLLMServer, judged_address: StartAddress, tmp_path
) -> None:
    fake_llm.respond_with("openai-compatible", reverses_shown)
    address = await judged_address()
    pool = tmp_path / "pool.jsonl"
    pool.write_text(
        "".join(json.dumps({"id": f"c{i:03d}", "text": f"passage {i}"}) + "\n" for i in range(30))
    )
    common = ("--query", "q", "--judge", "openai-compatible:any-name", "--k", "5", "--top-k", "5")
    table = await tierank("rank", str(pool), *common, "--server", address)
    as_json = await tierank("rank", str(pool), *common, "--format", "json", "--server", address)

    assert table.returncode == 4, table.stderr
    warning = table.stderr.strip().splitlines()[-1]
    assert warning.startswith("tierank rank: warning: provisional result (position_biased)")
    assert f"judge {JUDGE} follows shown positions (mean tau -1.00" in warning
    assert "reversing the shown order" in warning
    assert "follows shown positions" in table.stdout  # the summary line under the table
    assert as_json.returncode == 4
    summary = json.loads(as_json.stdout)
    assert summary["completion_reason"] == "position_biased"
    (judge,) = summary["stats"]["judges"]
    assert judge["position_bias"]["biased"] is True
