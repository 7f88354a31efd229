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
import re
import subprocess
import sys
from pathlib import Path

import pytest

BASE_URL = os.environ.get("TIERANK_LOCAL_LLM_URL", "")
MODEL = os.environ.get("TIERANK_LOCAL_LLM_MODEL", "")
REPO_ROOT = Path(__file__).resolve().parents[2]
DL19 = REPO_ROOT.parent / "shared" / "data" / "trec-dl"
QRELS = DL19 / "qrels.dl19-passage.txt"
TOPICS = DL19 / "topics.dl19-passage.txt"
PASSAGES = DL19 / "passages" / "dl19-rankllm-union-passages.jsonl"
BM25 = DL19 / "runs" / "run.rankllm.BM25.dl19.top100.trec"
# Small enough for a CPU: 5 queries x 2 batches x 2 shuffles = 20 calls of 5 passages.
QUERIES, BATCHES, SHUFFLES, K = 5, 2, 2, 5
EXIT_OK, EXIT_NO_VERDICT, EXIT_PROVISIONAL, EXIT_NOT_QUALIFIED = 0, 3, 4, 5
# `tierank rank` progress: "... judge openai-compatible/MODEL: failed (KIND: reason)".
FAILED_CALL = re.compile(r": failed \((\w+)")
CONTENT_FAILURES = {"unparseable", "truncated"}
COMMAND_TIMEOUT_S = 900

pytestmark = [
    pytest.mark.skipif(
        not (BASE_URL and MODEL),
        reason="needs a local model server: run `make test-local-llm`",
    ),
    pytest.mark.skipif(not DL19.is_dir(), reason=f"shared data not found at {DL19}"),
]


def tierank(*args: str) -> subprocess.CompletedProcess[str]:
    """`tierank ARGS` with an embedded server that sends openai-compatible calls to the model."""
    environment = {k: v for k, v in os.environ.items() if k != "TIERANK_SERVER"}
    environment["TIERANK_OPENAI_COMPATIBLE_BASE_URL"] = BASE_URL
    return subprocess.run(
        [sys.executable, "-m", "tierank.client", *args, "--timeout", str(COMMAND_TIMEOUT_S)],
        capture_output=True,
        text=True,
        timeout=COMMAND_TIMEOUT_S + 60,
        cwd=REPO_ROOT,
        env=environment,
    )


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


def write_bm25_pool(path: Path, size: int) -> str:
    """BM25's top `size` passages for DL19's first query, as a JSONL pool; returns the query."""
    qid, query = TOPICS.read_text().splitlines()[0].split("\t", 1)
    ranked = (line.split() for line in BM25.read_text().splitlines())
    top = [fields[2] for fields in ranked if fields[0] == qid][:size]
    texts = {}
    with PASSAGES.open() as passages:
        for line in passages:
            passage = json.loads(line)
            if passage["docid"] in top:
                texts[passage["docid"]] = passage["contents"]
    path.write_text("".join(json.dumps({"id": d, "text": texts[d]}) + "\n" for d in top))
    return query
