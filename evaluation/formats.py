"""Read and write TREC qrels, TREC run files and JSONL candidate files.

Qrels lines are ``qid iter docid grade`` (the second field, ``0`` or ``Q0``, is ignored as
trec_eval ignores it). Run lines are ``qid Q0 docid rank score tag``; fields after the sixth are
ignored, as trec_eval ignores them (its own ``results.trunc`` fixture has such lines). In both,
blank lines and lines whose first non-blank character is ``#`` are skipped; a ``#`` inside a
docid (``msmarco_v2.1_doc_00_880019750#4_...``) is part of the docid.

The rank column of a run is validated but not used: order comes from the scores, see
:mod:`tierank.evaluation.ordering`.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tierank.evaluation.ordering import rank_documents

Qrels = dict[str, dict[str, int]]
"""query id -> document id -> grade."""

Run = dict[str, dict[str, float]]
"""query id -> document id -> score."""


class FormatError(ValueError):
    """Input that does not follow its format; the message names the source and line."""

    def __init__(self, source: str, line_number: int | None, problem: str) -> None:
        where = source if line_number is None else f"{source}:{line_number}"
        super().__init__(f"{where}: {problem}")
        self.source = source
        self.line_number = line_number
        self.problem = problem


@dataclass(frozen=True)
class Candidate:
    """One document to be judged: an id, its text and free-form metadata."""

    id: str
    text: str
    metadata: dict[str, Any] = field(default_factory=dict)


def _content_lines(lines: Iterable[str]) -> Iterable[tuple[int, list[str]]]:
    for number, line in enumerate(lines, start=1):
        stripped = line.strip()
        if stripped and not stripped.startswith("#"):
            yield number, stripped.split()


def parse_qrels(lines: Iterable[str], source: str = "<qrels>") -> Qrels:
    """Parse qrels lines; a duplicate (query, document) pair or an empty input is an error."""
    qrels: Qrels = {}
    for number, fields in _content_lines(lines):
        if len(fields) != 4:
            raise FormatError(
                source, number, f"expected 4 fields 'qid iter docid grade', got {len(fields)}"
            )
        qid, _, docid, grade_text = fields
        try:
            grade = int(grade_text)
        except ValueError:
            raise FormatError(source, number, f"grade {grade_text!r} is not an integer") from None
        judged = qrels.setdefault(qid, {})
        if docid in judged:
            raise FormatError(source, number, f"document {docid!r} judged twice for query {qid!r}")
        judged[docid] = grade
    if not qrels:
        raise FormatError(source, None, "no judgments (the qrels file is empty)")
    return qrels


def parse_run(lines: Iterable[str], source: str = "<run>") -> Run:
    """Parse run lines; a document listed twice for one query is an error (as in trec_eval)."""
    run: Run = {}
    for number, fields in _content_lines(lines):
        if len(fields) < 6:
            raise FormatError(
                source,
                number,
                f"expected 6 fields 'qid Q0 docid rank score tag', got {len(fields)}",
            )
        qid, _, docid, rank_text, score_text = fields[:5]
        try:
            int(rank_text)
        except ValueError:
            raise FormatError(source, number, f"rank {rank_text!r} is not an integer") from None
        try:
            score = float(score_text)
        except ValueError:
            raise FormatError(source, number, f"score {score_text!r} is not a number") from None
        if not math.isfinite(score):
            raise FormatError(source, number, f"score {score_text!r} is not finite")
        scores = run.setdefault(qid, {})
        if docid in scores:
            raise FormatError(source, number, f"document {docid!r} listed twice for query {qid!r}")
        scores[docid] = score
    return run


def parse_candidates(lines: Iterable[str], source: str = "<candidates>") -> list[Candidate]:
    """Parse JSONL ``{"id", "text", "metadata"?}``; ``docid``/``contents`` are aliases."""
    candidates: list[Candidate] = []
    seen: set[str] = set()
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            candidate = parse_candidate(line)
        except ValueError as error:
            raise FormatError(source, number, str(error)) from None
        if candidate.id in seen:
            raise FormatError(source, number, f"duplicate candidate id {candidate.id!r}")
        seen.add(candidate.id)
        candidates.append(candidate)
    return candidates


def parse_candidate(line: str) -> Candidate:
    """One JSONL candidate line (see `parse_candidates`); ValueError says what is wrong with it.
    The command line reads passages and pools with it too, so both sides take the same lines."""
    try:
        record = json.loads(line)
    except json.JSONDecodeError as error:
        raise ValueError(f"invalid JSON: {error.msg}") from None
    except RecursionError:  # nested deeper than the parser's stack
        raise ValueError("a JSON value is nested too deeply") from None
    except ValueError:  # Python refuses integers of more than 4,300 digits
        raise ValueError("a JSON number is too long to read") from None
    if not isinstance(record, dict):
        raise ValueError("expected a JSON object")
    doc_id = _aliased_string(record, ("id", "docid"))
    text = _aliased_string(record, ("text", "contents"))
    metadata = record.get("metadata", {})
    if not isinstance(metadata, dict):
        raise ValueError("'metadata' must be a JSON object")
    return Candidate(doc_id, text, metadata)


def _aliased_string(record: Mapping[str, Any], names: Sequence[str]) -> str:
    present = [name for name in names if name in record]
    if not present:
        raise ValueError(f"missing field {' or '.join(map(repr, names))}")
    if len(present) > 1:
        raise ValueError(f"fields {present} are aliases; give only one")
    value = record[present[0]]
    if not isinstance(value, str):
        raise ValueError(f"field {present[0]!r} must be a string")
    return value


def _read_lines(path: str | Path) -> list[str]:
    # Not splitlines(): it also splits at U+2028, U+0085 and friends, which MS MARCO passages
    # contain inside JSON strings.
    return Path(path).read_text(encoding="utf-8").split("\n")


def read_qrels(path: str | Path) -> Qrels:
    return parse_qrels(_read_lines(path), source=str(path))


def read_run(path: str | Path) -> Run:
    return parse_run(_read_lines(path), source=str(path))


def read_candidates(path: str | Path) -> list[Candidate]:
    return parse_candidates(_read_lines(path), source=str(path))


def format_qrels(qrels: Mapping[str, Mapping[str, int]]) -> str:
    """Qrels as TREC text: `qid 0 docid grade` lines."""
    return "".join(
        f"{qid} 0 {docid} {grade}\n"
        for qid, judged in qrels.items()
        for docid, grade in judged.items()
    )


def write_qrels(path: str | Path, qrels: Mapping[str, Mapping[str, int]]) -> None:
    Path(path).write_text(format_qrels(qrels), encoding="utf-8")


def write_run(
    path: str | Path, run: Mapping[str, Mapping[str, float]], tag: str = "tierank"
) -> None:
    """Write a run with ranks in trec_eval order, so the rank column agrees with the scores."""
    if not tag or any(c.isspace() for c in tag):
        raise ValueError(f"run tag must be one word, got {tag!r}")
    lines = [
        f"{qid} Q0 {docid} {rank} {scores[docid]!r} {tag}\n"
        for qid, scores in run.items()
        for rank, docid in enumerate(rank_documents(scores), start=1)
    ]
    Path(path).write_text("".join(lines), encoding="utf-8")


def write_candidates(path: str | Path, candidates: Iterable[Candidate]) -> None:
    lines = [
        json.dumps({"id": c.id, "text": c.text, "metadata": c.metadata}, ensure_ascii=False) + "\n"
        for c in candidates
    ]
    Path(path).write_text("".join(lines), encoding="utf-8")
