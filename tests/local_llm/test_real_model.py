"""A real model through `openai-compatible`: Gemma 3 270M served by llama-cpp-python on
loopback, qualified on TREC DL19 and then used in a small ranking job, all through the
`tierank` command line and its embedded server.

Opt-in: `make test-local-llm` (scripts/local_llm.py) starts the model server and sets
TIERANK_LOCAL_LLM_URL and TIERANK_LOCAL_LLM_MODEL; without them, as in `make test` and CI,
every test here is skipped. A model this small is expected to judge no better than chance:
the point is that tierank talks to a real server and reports such a judge as useless.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from real_model import (
    BASE_URL,
    BATCHES,
    BM25,
    CONTENT_FAILURES,
    EXIT_NO_VERDICT,
    EXIT_NOT_QUALIFIED,
    EXIT_OK,
    EXIT_PROVISIONAL,
    FAILED_CALL,
    MODEL,
    PASSAGES,
    QRELS,
    QUERIES,
    SHUFFLES,
    TOPICS,
    K,
    tierank,
    write_bm25_pool,
)

pytestmark = [
    pytest.mark.skipif(
        not (BASE_URL and MODEL),
        reason="needs a local model server: run `make test-local-llm`",
    ),
    # Qwen answers readable orderings: test_position_following_model.py is its module.
    pytest.mark.skipif(
        os.environ.get("TIERANK_LOCAL_LLM", "gemma") != "gemma", reason="written for Gemma 270M"
    ),
    pytest.mark.usefixtures("shared_data"),
]


@pytest.fixture(scope="module")
def judge() -> str:
    return f"openai-compatible:{MODEL}?temperature=0"


@pytest.fixture(scope="module")
def db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One database for the module: the ranking job sees the qualification stored in it."""
    return tmp_path_factory.mktemp("local-llm") / "tierank.db"


@pytest.fixture(scope="module")
def qualification(judge: str, db: Path) -> tuple[int, dict]:
    done = tierank(
        *("qualify", "--judge", judge, "--qrels", str(QRELS), "--topics", str(TOPICS)),
        *("--passages", str(PASSAGES), "--run", str(BM25), "--queries", str(QUERIES)),
        *("--batches", str(BATCHES), "--shuffles", str(SHUFFLES), "--k", str(K), "--seed", "1"),
        *("--json", "--db", str(db)),
    )
    assert done.returncode in (EXIT_OK, EXIT_NOT_QUALIFIED), done.stderr
    # The figures land in the test's output for the record (pytest -s, or on failure).
    print(done.stdout)
    return done.returncode, json.loads(done.stdout)


def test_qualify_reports_the_real_model_as_useless(qualification: tuple[int, dict]) -> None:
    returncode, result = qualification
    listwise, cost = result["listwise"], result["cost"]
    assert returncode == EXIT_NOT_QUALIFIED and not result["usable"]
    assert result["verdict"].startswith("not usable") and result["weight"] == 0
    # Every call of the plan was made, and the server generated text for them: the exchange
    # works, it is the answers that are worthless (the rank test below tells the kinds apart).
    assert int(cost["calls"]) == QUERIES * BATCHES * SHUFFLES
    assert int(cost["usage"]["input_tokens"]) > 0 and int(cost["usage"]["output_tokens"]) > 0
    assert result["mean_latency_seconds"] > 0
    assert listwise["batch_size"] == K
    assert [p["position"] for p in listwise["first_position"]] == list(range(1, K + 1))
    accuracy = listwise["pair_accuracy"]
    assert 0 <= accuracy["low"] <= accuracy["high"] <= 1


@pytest.mark.usefixtures("qualification")
def test_a_useless_model_is_refused_and_when_allowed_adds_no_votes(
    judge: str, db: Path, tmp_path: Path
) -> None:
    pool = tmp_path / "pool.jsonl"
    query = write_bm25_pool(pool, size=8)
    rank = ("rank", str(pool), "--query", query, "--judge", judge, "--db", str(db))
    small = ("--k", "4", "--top-k", "3", "--format", "json")

    refused = tierank(*rank, *small)
    assert refused.returncode == 1 and "allow-unqualified-judges" in refused.stderr

    done = tierank(*rank, *small, "--allow-unqualified-judges")
    ranked = json.loads(done.stdout)
    placed = [cid for tier in ranked["tiers"] for cid in tier["candidate_ids"]]
    assert sorted(placed) == sorted(json.loads(line)["id"] for line in pool.open())
    (stats,) = ranked["stats"]["judges"]
    assert int(stats["calls"]) > 0 and int(stats["usage"]["output_tokens"]) > 0
    # Each failure is an answer that could not be read, never a failed exchange with the
    # server; an unreadable answer is no vote, so nothing is settled by it.
    failures = FAILED_CALL.findall(done.stderr)
    assert len(failures) == int(stats["failed_calls"])
    assert set(failures) <= CONTENT_FAILURES, done.stderr
    if int(stats["failed_calls"]) == int(stats["calls"]):
        assert done.returncode == EXIT_NO_VERDICT
        assert not any(tier["settled"] for tier in ranked["tiers"])
    else:
        assert done.returncode in (EXIT_OK, EXIT_PROVISIONAL), done.stderr
