"""A real instruction-tuned model that answers mostly by shown position: Qwen2.5-Coder-1.5B-
Instruct (Q4_K_M) served by llama-cpp-python on loopback, through `tierank` as a user runs it.

Opt-in: `scripts/local_llm.py --model qwen test` serves it and sets TIERANK_LOCAL_LLM=qwen with
the URL and model name; without them, as in `make test` and CI, every test here is skipped. The
model answers readable orderings, which mostly follow the positions it was shown (issue 22:
the shown order reversed in 78% of calls). Two things must catch it: qualification on human
labels, whose one-line verdict names the bias, and live detection in a job without labels,
which must not call the result settled.
"""

from __future__ import annotations

import json
import os

import pytest
from real_model import (
    BASE_URL,
    BM25,
    EXIT_NOT_QUALIFIED,
    EXIT_PROVISIONAL,
    MODEL,
    PASSAGES,
    QRELS,
    TOPICS,
    tierank,
    write_bm25_pool,
)

# ~13 s a call of 5 passages on 2 threads: 4 queries x 2 batches x 2 shuffles = 16 calls.
QUERIES, BATCHES, SHUFFLES, K = 4, 2, 2, 5

pytestmark = [
    pytest.mark.skipif(
        not (BASE_URL and MODEL) or os.environ.get("TIERANK_LOCAL_LLM") != "qwen",
        reason="needs the Qwen model server: scripts/local_llm.py --model qwen test",
    ),
    pytest.mark.usefixtures("shared_data"),
]


@pytest.fixture(scope="module")
def judge() -> str:
    return f"openai-compatible:{MODEL}?temperature=0"


def test_qualification_refuses_it_and_its_verdict_names_the_position_bias(judge, tmp_path):
    done = tierank(
        *("qualify", "--judge", judge, "--qrels", str(QRELS), "--topics", str(TOPICS)),
        *("--passages", str(PASSAGES), "--run", str(BM25), "--queries", str(QUERIES)),
        *("--batches", str(BATCHES), "--shuffles", str(SHUFFLES), "--k", str(K), "--seed", "1"),
        *("--json", "--db", str(tmp_path / "tierank.db")),
    )
    print(done.stdout)
    result = json.loads(done.stdout)
    assert done.returncode == EXIT_NOT_QUALIFIED and not result["usable"], done.stderr
    # The one line `tierank qualifications` shows says why, not only that it failed.
    assert "position" in result["verdict"], result["verdict"]


def test_a_job_on_it_alone_is_caught_without_labels_and_not_called_settled(judge, tmp_path):
    pool = tmp_path / "pool.jsonl"
    query = write_bm25_pool(pool, size=10)
    done = tierank(
        *("rank", str(pool), "--query", query, "--judge", judge, "--db", str(tmp_path / "t.db")),
        *("--k", str(K), "--top-k", "5", "--format", "json", "--allow-unqualified-judges"),
    )
    print(done.stdout, done.stderr)
    ranked = json.loads(done.stdout)
    assert done.returncode == EXIT_PROVISIONAL, done.stderr
    assert ranked["completion_reason"] == "position_biased"
    (stats,) = ranked["stats"]["judges"]
    assert stats["position_bias"]["biased"]
    assert not any(tier["settled"] for tier in ranked["tiers"])
    assert "position" in done.stderr
