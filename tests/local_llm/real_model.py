"""What the real-model tests share: the model server's address, DL19's files, `tierank` as a
process with an embedded server, and a BM25 pool of DL19's first query."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

from shared_data import TREC_DL

BASE_URL = os.environ.get("TIERANK_LOCAL_LLM_URL", "")
MODEL = os.environ.get("TIERANK_LOCAL_LLM_MODEL", "")
REPO_ROOT = Path(__file__).resolve().parents[2]
QRELS = TREC_DL / "qrels.dl19-passage.txt"
TOPICS = TREC_DL / "topics.dl19-passage.txt"
PASSAGES = TREC_DL / "passages" / "dl19-rankllm-union-passages.jsonl"
BM25 = TREC_DL / "runs" / "run.rankllm.BM25.dl19.top100.trec"
# Small enough for a CPU: 5 queries x 2 batches x 2 shuffles = 20 calls of 5 passages.
QUERIES, BATCHES, SHUFFLES, K = 5, 2, 2, 5
EXIT_OK, EXIT_NO_VERDICT, EXIT_PROVISIONAL, EXIT_NOT_QUALIFIED = 0, 3, 4, 5
# `tierank rank` progress: "... judge openai-compatible/MODEL: failed (KIND: reason)".
FAILED_CALL = re.compile(r": failed \((\w+)")
CONTENT_FAILURES = {"unparseable", "truncated"}
COMMAND_TIMEOUT_S = 900


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
