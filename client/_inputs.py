"""The one way the command line reads a user's file: runs, qrels, topics, passages, pools, human
samples and rubrics all go through here, with one set of rules for every command (README.md,
"Input files"), so that a file one command takes is taken by every other, means the same thing
there, and is refused there with the same words.

- Text: UTF-8, a leading byte order mark dropped; only "\\n" ends a line (a "\\r" before it is
  dropped; U+2028 inside a JSON string is text, as MS MARCO passages have it); blank lines are
  skipped; a NUL character, an undecodable line or an empty file is refused.
- Runs and qrels: trec_eval's formats, as `evaluation.formats` parses them for the server too.
  A run's documents are ordered as trec_eval orders them: by score, then docid (`rank_documents`;
  the rank column must be an integer but is not used).
- Topics: `qid<TAB>text`, or a JSON object per line (`qid`/`query_id`/`id`, `query`/`text`).
- Passages and pools: a JSON object per line as `evaluation.formats.parse_candidate` reads it
  (`{"id"|"docid", "text"|"contents", "metadata"?}`), or `docid<TAB>text`.
- A query or document listed twice is refused (in a passage collection read in part, among the
  passages read).
- The API's limits (tierank/limits.py) are checked here, where the file and line are known, so
  that an error names them and the query or document rather than a request's field: ids of at
  most MAX_ID_BYTES without white space, query texts of at most MAX_QUERY_BYTES, passage texts of
  at most MAX_PASSAGE_BYTES, no text empty, no NUL character in a text or metadata.

Every error is an `InputError` whose message names the file and, where there is one, the line.
"""

from __future__ import annotations

import codecs
import json
from collections.abc import Collection, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tierank.evaluation.formats import FormatError, Qrels, Run, parse_candidate, parse_qrels
from tierank.evaluation.formats import parse_run as parse_run_lines
from tierank.limits import MAX_GRADE, MAX_ID_BYTES, MAX_PASSAGE_BYTES, MAX_QUERY_BYTES, MIN_GRADE

# `--rubric @FILE`: the rubric is the file's text.
FILE_PREFIX = "@"
# The keys a JSON topic line may give its id and its text in, the first present counting.
_TOPIC_ID_KEYS = ("qid", "query_id", "id")
_TOPIC_TEXT_KEYS = ("query", "text")
# The labelling sheet's columns, in order (`tierank study sample` writes it, --human-sample
# reads it back once a person has filled in the grades).
SHEET_COLUMNS = ("qid", "docid", "query", "passage", "grade")
# An id or text quoted in an error is cut to this many characters: a 12 MB line must not be
# echoed whole.
_SHOWN_CHARS = 60
# A string of at most this many characters cannot pass MAX_ID_BYTES in UTF-8 (4 bytes each at
# most): the ids of a big run are checked without encoding each.
_SURELY_SHORT_ID = MAX_ID_BYTES // 4


class InputError(ValueError):
    """A file that cannot be read as what it should hold; the message names file and line."""


@dataclass(frozen=True)
class Passage:
    """A passage or pool line: its document id, text and metadata (values as text, as the API
    carries them: a JSON string as it is, any other JSON value as JSON)."""

    id: str
    text: str
    metadata: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class HumanSample:
    """A human sample read from a file: query -> document -> grade, and the line of each
    query's first judgment (for errors about a query)."""

    grades: Qrels
    lines: dict[str, int]

    @property
    def judgments(self) -> int:
        return sum(len(graded) for graded in self.grades.values())


def read_text(path: Path) -> str:
    """The whole file as text with "\\n" line ends, a leading byte order mark dropped."""
    try:
        data = path.read_bytes()
    except OSError as error:
        raise InputError(f"cannot read {path}: {error.strerror}") from None
    data = data.removeprefix(codecs.BOM_UTF8)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        line_number = data.count(b"\n", 0, error.start) + 1
        raise _not_utf8(path, line_number) from None
    if not text or text.isspace():
        raise _empty(path)
    nul = text.find("\0")
    if nul >= 0:
        raise _has_nul(path, text.count("\n", 0, nul) + 1)
    return text.replace("\r\n", "\n")


def read_lines(path: Path) -> Iterator[tuple[int, str]]:
    """The file's non-blank lines with their 1-based numbers, read as `read_text` reads the
    whole file but streamed: passage collections can be millions of lines."""
    any_line = False
    try:
        with open(path, "rb") as file:
            for line_number, raw in enumerate(file, start=1):
                if line_number == 1:
                    raw = raw.removeprefix(codecs.BOM_UTF8)
                try:
                    # Only "\n" ends a line: MS MARCO passages hold U+2028 inside JSON strings.
                    line = raw.decode("utf-8").rstrip("\r\n")
                except UnicodeDecodeError:
                    raise _not_utf8(path, line_number) from None
                if "\0" in line:
                    raise _has_nul(path, line_number)
                if line.strip():
                    any_line = True
                    yield line_number, line
    except OSError as error:
        raise InputError(f"cannot read {path}: {error.strerror}") from None
    if not any_line:
        raise _empty(path)


def read_rubric(value: str) -> str:
    """A `--rubric` value as the server takes it: `@FILE` is the file's text, anything else
    (a definition, `preset:NAME[@VERSION]`, nothing for the server's default) as given."""
    if not value.startswith(FILE_PREFIX):
        return value
    path = Path(value.removeprefix(FILE_PREFIX))
    try:
        return read_text(path).strip()
    except InputError as error:
        raise InputError(f"--rubric: {error}") from None


def read_run(path: Path) -> Run:
    """A TREC run: query -> document -> score (`rank_documents` gives trec_eval's order)."""
    try:
        run = parse_run_lines(read_text(path).split("\n"), source=str(path))
    except FormatError as error:
        raise InputError(str(error)) from None
    if not run:
        raise InputError(f"{path}: no run lines, only comments")
    _check_trec_ids(path, run)
    return run


def read_qrels(path: Path) -> Qrels:
    """TREC qrels: query -> document -> grade."""
    try:
        qrels = parse_qrels(read_text(path).split("\n"), source=str(path))
    except FormatError as error:
        raise InputError(str(error)) from None
    _check_trec_ids(path, qrels)
    return qrels


def read_topics(path: Path) -> dict[str, str]:
    """Query id -> query text, in the file's order."""
    topics: dict[str, str] = {}
    for line_number, line in read_lines(path):
        try:
            qid, text = _topic(line)
            _check_id("query", qid)
            _check_text("query", qid, text, MAX_QUERY_BYTES)
        except ValueError as error:
            raise _at(path, line_number, str(error)) from None
        if qid in topics:
            raise _at(path, line_number, f"query {qid!r} is listed twice")
        topics[qid] = text
    return topics


def read_passages(path: Path, wanted: Collection[str] | None = None) -> dict[str, Passage]:
    """Document id -> passage, in the file's order: every passage, or only the `wanted` ones,
    streamed (collections run to millions of lines; only what is kept is held in memory)."""
    passages: dict[str, Passage] = {}
    for line_number, line in read_lines(path):
        try:
            doc_id, text, metadata = _passage(line)
            if wanted is not None and doc_id not in wanted:
                continue
            _check_id("document", doc_id)
            _check_text("passage", doc_id, text, MAX_PASSAGE_BYTES)
        except ValueError as error:
            raise _at(path, line_number, str(error)) from None
        if doc_id in passages:
            raise _at(path, line_number, f"document {doc_id!r} is listed twice")
        as_text = {str(k): _metadata_text(v) for k, v in metadata.items()}
        if any("\0" in k or "\0" in v for k, v in as_text.items()):
            raise _at(
                path, line_number, f"the metadata of passage {doc_id!r} holds a NUL character"
            )
        passages[doc_id] = Passage(doc_id, text, as_text)
    return passages


def read_human_sample(path: Path) -> HumanSample:
    """A person's grades of some queries: TREC qrels, or a filled-in labelling sheet (its
    ungraded rows skipped). Every grade must be one of the study's, 0 to 3; a pair graded
    twice, or no grade at all, is an error naming the file (and line)."""
    grades: Qrels = {}
    lines: dict[str, int] = {}
    sheet = False
    for line_number, line in read_lines(path):
        cells = line.split("\t")
        if line_number == 1 and [c.strip().lower() for c in cells] == list(SHEET_COLUMNS):
            sheet = True
            continue
        if sheet:
            if len(cells) != len(SHEET_COLUMNS):
                raise _at(
                    path,
                    line_number,
                    f"expected {len(SHEET_COLUMNS)} tab-separated columns"
                    f" ({' '.join(SHEET_COLUMNS)}), got {len(cells)}",
                )
            qid, docid, grade_text = cells[0].strip(), cells[1].strip(), cells[4].strip()
            if not grade_text:
                continue  # not graded (yet)
        else:
            fields = line.split()
            if len(fields) != 4:
                raise _at(
                    path,
                    line_number,
                    "expected 4 fields 'qid iter docid grade' (TREC qrels) or a labelling"
                    f" sheet's header, got {len(fields)}",
                )
            qid, _, docid, grade_text = fields
        try:
            _check_id("query", qid)
            _check_id("document", docid)
        except ValueError as error:
            raise _at(path, line_number, str(error)) from None
        try:
            grade = int(grade_text)
        except ValueError:
            raise _at(path, line_number, f"grade {grade_text!r} is not a whole number") from None
        if not MIN_GRADE <= grade <= MAX_GRADE:
            raise _at(
                path,
                line_number,
                f"grade {grade} is outside {MIN_GRADE}-{MAX_GRADE}, the study's grades",
            )
        judged = grades.setdefault(qid, {})
        if docid in judged:
            raise _at(path, line_number, f"{qid} {docid} is graded twice")
        judged[docid] = grade
        lines.setdefault(qid, line_number)
    if not grades:
        raise InputError(f"{path}: no graded judgment (fill in the grade column)")
    return HumanSample(grades, lines)


def line_of(path: Path, qid: str, docid: str | None = None) -> int | None:
    """The first line of a run or qrels file about `qid` (and `docid`): found again when an
    error needs it, so that reading a big run keeps no line numbers."""
    for line_number, line in read_lines(path):
        fields = line.split()
        if fields and fields[0] == qid and (docid is None or fields[2:3] == [docid]):
            return line_number
    return None


def _topic(line: str) -> tuple[str, str]:
    if line.lstrip().startswith("{"):
        record = _json_object(line)
        qid = _first(record, _TOPIC_ID_KEYS, (str, int))
        text = _first(record, _TOPIC_TEXT_KEYS, (str,))
    else:
        qid, tab, text = line.partition("\t")
        if not tab:
            raise ValueError("expected 'qid<TAB>text' or a JSON object")
    return qid.strip(), text.strip()


def _passage(line: str) -> tuple[str, str, dict[str, Any]]:
    """A passage line's id, text and metadata (its values as the JSON gave them)."""
    if line.lstrip().startswith("{"):
        candidate = parse_candidate(line)
        return candidate.id, candidate.text, candidate.metadata
    doc_id, tab, text = line.partition("\t")
    if not tab:
        raise ValueError("expected 'docid<TAB>text' or a JSON object")
    return doc_id.strip(), text, {}


def _metadata_text(value: object) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def _json_object(line: str) -> dict[str, object]:
    try:
        record = json.loads(line)
    except json.JSONDecodeError as error:
        raise ValueError(f"invalid JSON: {error.msg}") from None
    except (RecursionError, ValueError):
        raise ValueError("a JSON value is nested too deeply or a number too long") from None
    if not isinstance(record, dict):
        raise ValueError("expected a JSON object")
    return record


def _first(record: Mapping[str, object], keys: tuple[str, ...], kinds: tuple[type, ...]) -> str:
    for key in keys:
        if key in record:
            value = record[key]
            if isinstance(value, bool) or not isinstance(value, kinds):
                raise ValueError(f"field {key!r} must be a {' or '.join(_KIND[k] for k in kinds)}")
            return str(value)
    raise ValueError(f"missing field {' or '.join(map(repr, keys))}")


_KIND = {str: "string", int: "whole number"}


def _check_id(kind: str, value: str) -> None:
    """The API's rule for ids (query and document ids alike): 1 to MAX_ID_BYTES bytes of
    UTF-8, no white space (an id is one word, as runs and qrels can only hold it)."""
    if not value:
        raise ValueError(f"a {kind} id is empty")
    if len(value) > _SURELY_SHORT_ID and len(value.encode()) > MAX_ID_BYTES:
        raise ValueError(
            f"{kind} id {_shown(value)} is {len(value.encode()):,} bytes, over the limit of"
            f" {MAX_ID_BYTES} (tierank/limits.py)"
        )
    if any(c.isspace() for c in value):
        raise ValueError(f"{kind} id {_shown(value)} holds white space; an id is one word")


def _check_text(kind: str, ident: str, text: str, limit: int) -> None:
    if not text.strip():
        raise ValueError(f"{kind} {ident!r} has no text")
    size = len(text.encode())
    if size > limit:
        raise ValueError(
            f"the text of {kind} {ident!r} is {size:,} bytes, over the limit of {limit:,}"
            " (tierank/limits.py)"
        )
    if "\0" in text:
        raise ValueError(f"the text of {kind} {ident!r} holds a NUL character")


def _check_trec_ids(path: Path, labels: Mapping[str, Mapping[str, object]]) -> None:
    # White space cannot be in a field of these files: only the length is left to check, and
    # the line is looked for only when an id is too long.
    for qid, documents in labels.items():
        _check_trec_id(path, "query", qid, qid, None)
        for docid in documents:
            _check_trec_id(path, "document", docid, qid, docid)


def _check_trec_id(path: Path, kind: str, value: str, qid: str, docid: str | None) -> None:
    if len(value) <= _SURELY_SHORT_ID:
        return
    try:
        _check_id(kind, value)
    except ValueError as error:
        line = line_of(path, qid, docid)
        raise (_at(path, line, str(error)) if line else InputError(f"{path}: {error}")) from None


def _shown(value: str) -> str:
    return repr(value if len(value) <= _SHOWN_CHARS else value[: _SHOWN_CHARS - 1] + "…")


def _at(path: Path, line_number: int, problem: str) -> InputError:
    return InputError(f"{path}:{line_number}: {problem}")


def _not_utf8(path: Path, line_number: int) -> InputError:
    return _at(path, line_number, "not UTF-8 text")


def _has_nul(path: Path, line_number: int) -> InputError:
    return _at(path, line_number, "a NUL character: not text")


def _empty(path: Path) -> InputError:
    return InputError(f"{path}: the file is empty")
