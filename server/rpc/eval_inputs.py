"""Reading the EvalService's inputs: files sent by content, measure names, judge specs.

Every reader raises `InvalidInput` with field violations that name the request field, the
file and the line, so a client can point its user at the exact place to fix.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

from tierank.evaluation import (
    Candidate,
    FormatError,
    Measure,
    MeasureError,
    Qrels,
    Run,
    parse_candidates,
    parse_measure,
    parse_qrels,
    parse_run,
)
from tierank.limits import (
    DEFAULT_MEASURE,
    DEFAULT_OPERATION_MAX_IN_FLIGHT,
    MAX_IN_FLIGHT,
)
from tierank.server.errors import FieldViolation, InvalidInput
from tierank.server.judges.base import Passage
from tierank.v1 import eval_pb2

T = TypeVar("T")


def _lines(file: eval_pb2.TextFile) -> list[str]:
    # A byte order mark is an editor's, not the first query id's: every client reads files so.
    # Not splitlines(): MS MARCO passages hold U+2028 and friends inside JSON strings.
    return file.content.removeprefix("\ufeff").split("\n")


def _source(file: eval_pb2.TextFile, fallback: str) -> str:
    return file.name or fallback


def _parse(
    field: str,
    file: eval_pb2.TextFile,
    parse: Callable[[list[str], str], T],
) -> tuple[T | None, list[FieldViolation]]:
    source = _source(file, field)
    try:
        return parse(_lines(file), source), []
    except FormatError as error:
        return None, [FieldViolation(field, str(error))]


def read_qrels(field: str, file: eval_pb2.TextFile) -> Qrels:
    qrels, violations = _parse(field, file, parse_qrels)
    if violations:
        raise InvalidInput(violations)
    assert qrels is not None
    return qrels


def read_runs(field: str, files: Sequence[eval_pb2.TextFile]) -> list[tuple[str, Run]]:
    """(name, run) per file; every bad file is reported, not only the first."""
    runs: list[tuple[str, Run]] = []
    violations: list[FieldViolation] = []
    names: dict[str, int] = {}
    for i, file in enumerate(files):
        where = f"{field}[{i}]"
        run, problems = _parse(where, file, parse_run)
        violations += problems
        if run is not None and not run:
            violations.append(FieldViolation(where, f"{_source(file, where)}: the run is empty"))
        name = _source(file, where)
        if name in names:
            violations.append(
                FieldViolation(f"{where}.name", f"duplicates {field}[{names[name]}].name")
            )
        names.setdefault(name, i)
        if run:
            runs.append((name, run))
    if violations:
        raise InvalidInput(violations)
    return runs


def read_passages(field: str, file: eval_pb2.TextFile) -> dict[str, Candidate]:
    passages, violations = _parse(field, file, parse_candidates)
    if violations:
        raise InvalidInput(violations)
    assert passages is not None
    return {p.id: p for p in passages}


def as_passage(candidate: Candidate) -> Passage:
    """A passage file's record as judges see it."""
    return Passage(candidate.id, candidate.text, {k: str(v) for k, v in candidate.metadata.items()})


def read_topics(field: str, file: eval_pb2.TextFile) -> dict[str, str]:
    """`qid<TAB>text` lines, blank lines skipped."""
    topics: dict[str, str] = {}
    source = _source(file, field)
    for number, line in enumerate(_lines(file), start=1):
        if not line.strip():
            continue
        qid, tab, text = line.rstrip("\r").partition("\t")
        if not tab or not qid.strip() or not text.strip():
            raise InvalidInput(
                [FieldViolation(field, f"{source}:{number}: expected 'qid<TAB>query text'")]
            )
        topics[qid.strip()] = text.strip()
    if not topics:
        raise InvalidInput([FieldViolation(field, f"{source}: no topics")])
    return topics


def read_measures(field: str, names: Sequence[str]) -> list[Measure]:
    measures: list[Measure] = []
    violations: list[FieldViolation] = []
    for i, name in enumerate(names or [DEFAULT_MEASURE]):
        where = f"{field}[{i}]" if names else field
        try:
            measures.append(parse_measure(name))
        except MeasureError as error:
            violations.append(FieldViolation(where, str(error)))
    if violations:
        raise InvalidInput(violations)
    return measures


def read_max_in_flight(field: str, request: object) -> int:
    if not request.HasField(field):  # type: ignore[attr-defined]
        return DEFAULT_OPERATION_MAX_IN_FLIGHT
    value = getattr(request, field)
    if not 1 <= value <= MAX_IN_FLIGHT:
        raise InvalidInput([FieldViolation(field, f"must be between 1 and {MAX_IN_FLIGHT}")])
    return value
