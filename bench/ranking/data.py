"""Load a TREC-style collection: topics, graded qrels, a first-stage run and passage texts."""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

# The repository root is the `tierank` package; shared data lives beside the repository.
REPO_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_DATA_DIR = REPO_ROOT.parent / "shared" / "data" / "trec-dl"
DEFAULT_TOPICS = DEFAULT_DATA_DIR / "topics.dl19-passage.txt"
DEFAULT_QRELS = DEFAULT_DATA_DIR / "qrels.dl19-passage.txt"
DEFAULT_RUN = DEFAULT_DATA_DIR / "runs" / "run.rankllm.BM25.dl19.top100.trec"
DEFAULT_PASSAGES = DEFAULT_DATA_DIR / "passages" / "rankllm.BM25.retrieve_results_dl19.json"


@dataclass(frozen=True)
class Query:
    qid: str
    text: str
    # First-stage candidates, best first.
    candidates: tuple[str, ...]
    passages: dict[str, str]
    # Every judged passage of the query (also outside the candidates): nDCG's ideal needs them.
    qrels: dict[str, int]

    def grade(self, pid: str) -> int:
        # TREC convention: an unjudged passage counts as grade 0.
        return self.qrels.get(pid, 0)


def read_topics(path: Path) -> dict[str, str]:
    topics = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.strip():
            qid, text = line.split("\t", 1)
            topics[qid] = text.strip()
    return topics


def read_qrels(path: Path) -> dict[str, dict[str, int]]:
    qrels: dict[str, dict[str, int]] = defaultdict(dict)
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.strip() and not line.startswith("#"):
            qid, _, pid, grade = line.split()[:4]
            qrels[qid][pid] = int(grade)
    return dict(qrels)


def read_run(path: Path, depth: int) -> dict[str, tuple[str, ...]]:
    ranked: dict[str, list[tuple[int, str]]] = defaultdict(list)
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.strip():
            qid, _, pid, rank = line.split()[:4]
            ranked[qid].append((int(rank), pid))
    return {qid: tuple(pid for _, pid in sorted(rows)[:depth]) for qid, rows in ranked.items()}


def read_passages(path: Path) -> dict[str, str]:
    """Passage texts by id: a `{"docid","contents"}` jsonl or a rank_llm retrieve-results json."""
    if path.suffix == ".jsonl":
        texts = {}
        with path.open(encoding="utf-8") as lines:
            for line in lines:
                if line.strip():
                    row = json.loads(line)
                    texts[str(row["docid"])] = row["contents"]
        return texts
    return {
        str(hit["docid"]): hit["content"]
        for entry in json.loads(path.read_text(encoding="utf-8"))
        for hit in entry["hits"]
    }


def load_queries(
    topics: Path = DEFAULT_TOPICS,
    qrels: Path = DEFAULT_QRELS,
    run: Path = DEFAULT_RUN,
    passages: Path = DEFAULT_PASSAGES,
    depth: int = 100,
) -> list[Query]:
    """Queries that have qrels and a run, in topic-file order."""
    texts = read_passages(passages)
    judged = read_qrels(qrels)
    ranked = read_run(run, depth)
    queries = []
    for qid, text in read_topics(topics).items():
        if qid not in judged or qid not in ranked:
            continue
        candidates = ranked[qid]
        missing = [pid for pid in candidates if pid not in texts]
        if missing:
            raise ValueError(f"query {qid}: no text for {len(missing)} passages, e.g. {missing[0]}")
        queries.append(
            Query(
                qid=qid,
                text=text,
                candidates=candidates,
                passages={pid: texts[pid] for pid in candidates},
                qrels=judged[qid],
            )
        )
    return queries
