"""`tierank rubrics` and `tierank rank --rubric preset:NAME`, as real processes."""

from __future__ import annotations

import json

from cli_process import POOL, QUERY, tierank

from tierank.client import Client


def test_rubrics_lists_the_presets_and_prints_one(tierank_server: str) -> None:
    table = tierank("rubrics", "--server", tierank_server)
    assert table.returncode == 0, table.stderr
    for name in ("context-relevance", "answer-usefulness", "answer-relevance", "groundedness"):
        assert f"preset:{name}" in table.stdout
    listed = json.loads(tierank("rubrics", "--json", "--server", tierank_server).stdout)
    assert {p["kind"] for p in listed} == {"listwise", "pointwise"}
    one = tierank("rubrics", "groundedness", "--server", tierank_server)
    (groundedness,) = [p for p in listed if p["name"] == "groundedness"]
    assert one.stdout == groundedness["text"] + "\n"
    unknown = tierank("rubrics", "groundednes", "--server", tierank_server)
    assert unknown.returncode == 2
    assert "no preset named 'groundednes'" in unknown.stderr


def test_rank_sends_the_preset_name_and_the_job_holds_its_text(tierank_server: str) -> None:
    ranked = tierank(
        "rank", POOL, "--query", QUERY, "--rubric", "preset:answer-usefulness@1",
        "--format", "json", "--server", tierank_server,
    )  # fmt: skip
    assert ranked.returncode == 0, ranked.stderr
    text = tierank("rubrics", "answer-usefulness", "--server", tierank_server).stdout
    with Client(tierank_server) as client:
        job = client.get_job(json.loads(ranked.stdout)["job"])
    assert job.spec.rubric == text.rstrip("\n")

    refused = tierank(
        "rank", POOL, "--query", QUERY, "--rubric", "preset:usefulness", "--server", tierank_server
    )
    assert refused.returncode == 2
    assert "tierank rank: --rubric: unknown rubric preset 'usefulness'" in refused.stderr
    assert "context-relevance" in refused.stderr
