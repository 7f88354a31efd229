"""Read candidate pools and queries from the files IR people already have.

- a JSONL pool: one `{"id", "text", "metadata"?}` (or `{"docid", "contents"}`) per line;
- a TREC run (`qid Q0 docid rank score tag`) plus passage texts (JSONL as above, or
  `docid<TAB>text` TSV), restricted to one query, in the run's rank order;
- topics (`qid<TAB>text` TSV, or JSONL with `qid`/`query_id`/`id` and `query`/`text`).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tierank.client._inputs import InputError, read_lines
from tierank.client._spec import candidate, candidate_from_dict
from tierank.v1 import rank_pb2


class PoolError(InputError):
    """An input file is missing, malformed or does not contain what was asked for."""


def read_jsonl_pool(path: Path) -> list[rank_pb2.Candidate]:
    return [_candidate(record, path, line) for line, record in _jsonl_records(path)]


def read_run_pool(run: Path, passages: Path, qid: str) -> list[rank_pb2.Candidate]:
    """The run's candidates for `qid`, best-ranked first, with their passage texts."""
    ranked: list[tuple[int, str]] = []
    for line_number, line in read_lines(run):
        fields = line.split()
        if len(fields) != 6:
            raise PoolError(f"{run}:{line_number}: expected 'qid Q0 docid rank score tag'")
        if fields[0] == qid:
            ranked.append((_int(fields[3], run, line_number), fields[2]))
    if not ranked:
        raise PoolError(f"{run}: no lines for query {qid!r}")
    doc_ids = [doc_id for _, doc_id in sorted(ranked)]
    texts = _passage_texts(passages, set(doc_ids))
    missing = [doc_id for doc_id in doc_ids if doc_id not in texts]
    if missing:
        raise PoolError(f"{passages}: no text for {len(missing)} docids, e.g. {missing[:3]}")
    return [candidate(doc_id, texts[doc_id]) for doc_id in doc_ids]


def read_topic(path: Path, qid: str) -> str:
    for line_number, line in read_lines(path):
        if line.startswith("{"):
            record = _json(line, path, line_number)
            record_qid = next((record[k] for k in ("qid", "query_id", "id") if k in record), None)
            text = record.get("query", record.get("text"))
        else:
            record_qid, _, text = line.partition("\t")
        if str(record_qid) == qid and text:
            return str(text)
    raise PoolError(f"{path}: no topic {qid!r}")


def _passage_texts(path: Path, wanted: set[str]) -> dict[str, str]:
    # Collections can be millions of lines: stream them and keep only the wanted passages.
    texts: dict[str, str] = {}
    for line_number, line in read_lines(path):
        if line.startswith("{"):
            passage = _candidate(_json(line, path, line_number), path, line_number)
            doc_id, text = passage.id, passage.text
        else:
            doc_id, _, text = line.partition("\t")
        if doc_id in wanted:
            texts[doc_id] = text
    return texts


def _candidate(record: Any, path: Path, line_number: int) -> rank_pb2.Candidate:
    if not isinstance(record, dict):
        raise PoolError(f"{path}:{line_number}: expected a JSON object")
    try:
        return candidate_from_dict(record)
    except ValueError as error:
        raise PoolError(f"{path}:{line_number}: {error}") from None


def _jsonl_records(path: Path) -> Iterator[tuple[int, Any]]:
    for line_number, line in read_lines(path):
        yield line_number, _json(line, path, line_number)


def _json(line: str, path: Path, line_number: int) -> Any:
    try:
        return json.loads(line)
    except json.JSONDecodeError as error:
        raise PoolError(f"{path}:{line_number}: not JSON ({error.msg})") from None


def _int(text: str, path: Path, line_number: int) -> int:
    try:
        return int(text)
    except ValueError:
        raise PoolError(f"{path}:{line_number}: rank {text!r} is not an integer") from None
