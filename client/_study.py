"""A study's inputs as the files IR people have them, cut into AddStudyInputs chunks.

- topics: `qid<TAB>text` TSV, or JSONL with `qid`/`query_id`/`id` and `query`/`text`;
- runs: TREC run files (`qid Q0 docid rank score tag`), each under a system name;
- passages: JSONL (`{"id"|"docid", "text"|"contents", "metadata"?}`) or `docid<TAB>text` TSV;
  only the passages of pooled documents are read into memory and sent;
- human qrels: TREC qrels (`qid iter docid grade`);
- a human sample: TREC qrels, or a labelling sheet as `tierank study sample` writes it (TSV
  with the header `qid docid query passage grade`; rows left ungraded are skipped), grades 0-3.

Chunks are cut by their encoded size, well under gRPC's default 4 MiB message limit, and each
has a request_id made of a prefix and a digest of its content, so that an upload that is
started again (with the same files, or with more of them) sends the same chunks under the same
ids and the server adds none twice.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from tierank.client._inputs import InputError, read_lines, read_text
from tierank.evaluation import FormatError, Qrels, Run, parse_qrels, parse_run, pool_runs
from tierank.limits import MAX_GRADE, MIN_GRADE
from tierank.v1 import study_pb2

# Each chunk's encoded size stays under this: a quarter of gRPC's default receive limit, so that
# a server with the default accepts it with room to spare.
CHUNK_BYTES = 1024 * 1024
# Bytes a repeated field's tag and length prefix add to an item, at most (a 1 MiB item's
# length takes 3 bytes): counted generously, the chunk stays under CHUNK_BYTES.
_FIELD_OVERHEAD_BYTES = 8
# Hex digits of a chunk's SHA-256 in its request_id: 128 bits, no collision between chunks.
_DIGEST_CHARS = 32
_TOPIC_ID_KEYS = ("qid", "query_id", "id")
_TOPIC_TEXT_KEYS = ("query", "text")
_PASSAGE_ID_KEYS = ("id", "docid", "doc_id")
_PASSAGE_TEXT_KEYS = ("text", "contents")


# The labelling sheet's columns, in order (`tierank study sample` writes it, --human-sample
# reads it back once a person has filled in the grades).
SHEET_COLUMNS = ("qid", "docid", "query", "passage", "grade")


@dataclass
class StudyFiles:
    """What a study is made of, read from files."""

    topics: dict[str, str]
    runs: dict[str, Run]
    passages: dict[str, tuple[str, dict[str, str]]] = field(default_factory=dict)
    human: Qrels = field(default_factory=dict)
    sample: Qrels = field(default_factory=dict)


@dataclass(frozen=True)
class HumanSample:
    """A human sample read from a file: query -> document -> grade, and the line of each
    query's first judgment (for errors about a query)."""

    grades: Qrels
    lines: dict[str, int]

    @property
    def judgments(self) -> int:
        return sum(len(graded) for graded in self.grades.values())


def read_topics(path: Path) -> dict[str, str]:
    topics: dict[str, str] = {}
    for line_number, line in read_lines(path):
        if line.lstrip().startswith("{"):
            record = _json(line, path, line_number)
            qid = _first(record, _TOPIC_ID_KEYS)
            text = _first(record, _TOPIC_TEXT_KEYS)
        else:
            qid, tab, text = line.partition("\t")
            if not tab:
                raise InputError(f"{path}:{line_number}: expected 'qid<TAB>text' or JSON")
        if not qid or not str(text).strip():
            raise InputError(f"{path}:{line_number}: a topic needs a query id and a text")
        if str(qid) in topics:
            raise InputError(f"{path}:{line_number}: query {qid!r} is listed twice")
        topics[str(qid)] = str(text).strip()
    return topics


def read_run_file(path: Path) -> Run:
    try:
        return parse_run(read_text(path).split("\n"), source=str(path))
    except FormatError as error:
        raise InputError(str(error)) from None


def read_qrels_file(path: Path) -> Qrels:
    try:
        return parse_qrels(read_text(path).split("\n"), source=str(path))
    except FormatError as error:
        raise InputError(str(error)) from None


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
                raise InputError(
                    f"{path}:{line_number}: expected {len(SHEET_COLUMNS)} tab-separated"
                    f" columns ({' '.join(SHEET_COLUMNS)}), got {len(cells)}"
                )
            qid, docid, grade_text = cells[0].strip(), cells[1].strip(), cells[4].strip()
            if not grade_text:
                continue  # not graded (yet)
        else:
            fields = line.split()
            if len(fields) != 4:
                raise InputError(
                    f"{path}:{line_number}: expected 4 fields 'qid iter docid grade' (TREC"
                    f" qrels) or a labelling sheet's header, got {len(fields)}"
                )
            qid, _, docid, grade_text = fields
        try:
            grade = int(grade_text)
        except ValueError:
            message = f"{path}:{line_number}: grade {grade_text!r} is not a whole number"
            raise InputError(message) from None
        if not MIN_GRADE <= grade <= MAX_GRADE:
            raise InputError(
                f"{path}:{line_number}: grade {grade} is outside {MIN_GRADE}-{MAX_GRADE},"
                " the study's grades"
            )
        judged = grades.setdefault(qid, {})
        if docid in judged:
            raise InputError(f"{path}:{line_number}: {qid} {docid} is graded twice")
        judged[docid] = grade
        lines.setdefault(qid, line_number)
    if not grades:
        raise InputError(f"{path}: no graded judgment (fill in the grade column)")
    return HumanSample(grades, lines)


def pooled_documents(runs: Mapping[str, Run], depth: int) -> set[str]:
    """The documents the server will pool: every run's top `depth` of each query."""
    return {d.docid for pool in pool_runs(runs, depth).values() for d in pool}


def read_passages(path: Path, wanted: set[str]) -> dict[str, tuple[str, dict[str, str]]]:
    """The wanted passages (text and metadata), streamed: collections run to millions of
    lines. Passages the runs never pool are skipped."""
    passages: dict[str, tuple[str, dict[str, str]]] = {}
    for line_number, line in read_lines(path):
        if line.lstrip().startswith("{"):
            record = _json(line, path, line_number)
            doc_id = _first(record, _PASSAGE_ID_KEYS)
            text = _first(record, _PASSAGE_TEXT_KEYS)
            metadata = record.get("metadata") or {}
            if not isinstance(metadata, dict):
                raise InputError(f"{path}:{line_number}: metadata must be a JSON object")
        else:
            doc_id, tab, text = line.partition("\t")
            metadata = {}
            if not tab:
                raise InputError(f"{path}:{line_number}: expected 'docid<TAB>text' or JSON")
        if str(doc_id) in wanted:
            passages[str(doc_id)] = (str(text), {str(k): str(v) for k, v in metadata.items()})
    return passages


def chunks(files: StudyFiles, prefix: str) -> Iterator[study_pb2.AddStudyInputsRequest]:
    """The inputs as AddStudyInputs requests (without `study`), each under CHUNK_BYTES, each
    request_id `prefix` and the digest of the chunk's content."""
    builder = _Chunks(prefix)
    for qid, text in files.topics.items():
        yield from builder.add("topics", study_pb2.StudyTopic(query_id=qid, text=text))
    yield from builder.flush()
    for system, run in files.runs.items():
        for qid, scores in run.items():
            entries = [
                study_pb2.RunEntry(query_id=qid, doc_id=doc, score=score)
                for doc, score in scores.items()
            ]
            yield from builder.add_entries(system, entries)
        yield from builder.flush()
    for doc_id, (text, metadata) in files.passages.items():
        passage = study_pb2.StudyPassage(doc_id=doc_id, text=text, metadata=metadata)
        yield from builder.add("passages", passage)
    for field_name, qrels in (("human_qrels", files.human), ("human_sample", files.sample)):
        for qid, grades in qrels.items():
            for doc_id, grade in grades.items():
                judgment = study_pb2.HumanJudgment(query_id=qid, doc_id=doc_id, grade=grade)
                yield from builder.add(field_name, judgment)
    yield from builder.flush()


class _Chunks:
    """Fills one request at a time, handing it out before it would pass CHUNK_BYTES."""

    def __init__(self, prefix: str) -> None:
        self._prefix = prefix
        self._current = self._new()

    def _new(self) -> study_pb2.AddStudyInputsRequest:
        # The size is counted as items are added: ByteSize() of the growing message each time
        # would make cutting quadratic (minutes for a big run).
        self._size = 0
        return study_pb2.AddStudyInputsRequest()

    def _take(self, size: int) -> bool:
        """Count an item of `size` bytes in; False (counting nothing) if it does not fit."""
        # An item's field tag and length prefix, and its run's, take a few bytes more.
        size += _FIELD_OVERHEAD_BYTES
        if self._size and self._size + size > CHUNK_BYTES:
            return False
        self._size += size
        return True

    def add(self, field_name: str, item: object) -> Iterator[study_pb2.AddStudyInputsRequest]:
        size = item.ByteSize()  # type: ignore[attr-defined]
        if not self._take(size):
            yield from self.flush()
            self._take(size)
        getattr(self._current, field_name).append(item)

    def add_entries(
        self, system: str, entries: Iterable[study_pb2.RunEntry]
    ) -> Iterator[study_pb2.AddStudyInputsRequest]:
        run = self._run_of(system)
        for entry in entries:
            size = entry.ByteSize()
            if not self._take(size):
                yield from self.flush()
                run = self._run_of(system)
                self._take(size)
            run.entries.append(entry)

    def _run_of(self, system: str) -> study_pb2.StudyRunChunk:
        if self._current.runs and self._current.runs[-1].system == system:
            return self._current.runs[-1]
        self._size += len(system.encode()) + _FIELD_OVERHEAD_BYTES
        return self._current.runs.add(system=system)

    def flush(self) -> Iterator[study_pb2.AddStudyInputsRequest]:
        if self._size:
            content = self._current.SerializeToString(deterministic=True)
            digest = hashlib.sha256(content).hexdigest()[:_DIGEST_CHARS]
            self._current.request_id = f"{self._prefix}-{digest}"
            yield self._current
            self._current = self._new()


def _first(record: Mapping[str, object], keys: tuple[str, ...]) -> str:
    for key in keys:
        if key in record:
            return str(record[key])
    return ""


def _json(line: str, path: Path, line_number: int) -> dict[str, object]:
    try:
        record = json.loads(line)
    except json.JSONDecodeError as error:
        raise InputError(f"{path}:{line_number}: not JSON ({error.msg})") from None
    if not isinstance(record, dict):
        raise InputError(f"{path}:{line_number}: expected a JSON object")
    return record
