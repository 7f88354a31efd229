"""The candidates and query of one `tierank rank`, from the files IR people already have, read
by the command line's one reader (`tierank.client._inputs`):

- a pool: one passage per line (`{"id", "text", "metadata"?}`, `{"docid", "contents"}` or
  `docid<TAB>text`), in the file's order;
- a TREC run plus passages: the run's documents for one query, in trec_eval's order (score,
  then docid), each with its passage's text and metadata;
- a query's text from topics.
"""

from __future__ import annotations

from pathlib import Path

from tierank.client._inputs import InputError, Passage, read_passages, read_run, read_topics
from tierank.client._spec import candidate
from tierank.evaluation.ordering import rank_documents
from tierank.v1 import rank_pb2


def read_jsonl_pool(path: Path) -> list[rank_pb2.Candidate]:
    return [_candidate(passage) for passage in read_passages(path).values()]


def read_run_pool(run: Path, passages: Path, qid: str) -> list[rank_pb2.Candidate]:
    """The run's candidates for `qid`, best first, with their passages' texts and metadata."""
    scores = read_run(run).get(qid)
    if not scores:
        raise InputError(f"{run}: no lines for query {qid!r}")
    doc_ids = rank_documents(scores)
    found = read_passages(passages, set(doc_ids))
    missing = [doc_id for doc_id in doc_ids if doc_id not in found]
    if missing:
        raise InputError(f"{passages}: no text for {len(missing)} docids, e.g. {missing[:3]}")
    return [_candidate(found[doc_id]) for doc_id in doc_ids]


def read_topic(path: Path, qid: str) -> str:
    text = read_topics(path).get(qid)
    if text is None:
        raise InputError(f"{path}: no topic {qid!r}")
    return text


def _candidate(passage: Passage) -> rank_pb2.Candidate:
    return candidate(passage.id, passage.text, passage.metadata)
