"""The 3-model ensemble of docs/providers.md, run with the documented command line: `tierank rank`
with its embedded server, which reads provider settings from TIERANK_JUDGES_CONFIG."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from e2e_jobs import judge_name
from graded_fakes import MODELS, answer_by_grade, best_first, graded_pool

FLAVORS = ("openai", "anthropic", "gemini")


def test_tierank_rank_with_an_adaptive_three_provider_ensemble(
    fake_llm, write_judges_config, tmp_path
):
    answer_by_grade(fake_llm, FLAVORS)
    pool = graded_pool(20, seed=9, words=8)
    pool_file = tmp_path / "pool.jsonl"
    pool_file.write_text("".join(json.dumps({"id": c.id, "text": c.text}) + "\n" for c in pool))
    judges = [arg for f in FLAVORS for arg in ("--judge", f"{f}:{MODELS[f]}")]
    command = [
        *(sys.executable, "-m", "tierank.client", "rank", str(pool_file)),
        *("--query", "which passage has the highest grade"),
        *("--rubric", "a passage is better the higher its grade"),
        *judges,
        *("--ensemble", "adaptive", "--quorum", "2", "--k", "5", "--top-k", "3"),
        *("--format", "json", "--db", str(tmp_path / "cli.db"), "--timeout", "60"),
    ]
    env = {**os.environ, "TIERANK_JUDGES_CONFIG": str(write_judges_config())}
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=90)

    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["completion_reason"] == "settled"
    top = [cid for tier in result["tiers"] for cid in tier["candidate_ids"]][:3]
    assert top == best_first(pool)[:3]
    calls = {j["judge"]: j.get("calls", 0) for j in result["stats"]["judges"]}
    assert set(calls) == {judge_name(f) for f in FLAVORS}
    assert all(len(fake_llm.requests(f)) >= calls[judge_name(f)] for f in FLAVORS)
    assert calls[judge_name("openai")] > 0 and calls[judge_name("anthropic")] > 0
    # Judges that agree leave the third one idle in adaptive mode.
    assert calls[judge_name("gemini")] == 0
