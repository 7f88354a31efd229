"""A study's inputs: each chunk checked at the API edge and counted as it arrives, and all of
them assembled (conflicts found) when the study starts.

Chunks are stored as they were sent (AddStudyInputsRequest bytes): assembling reads them again,
so nothing but the counts is computed while a client uploads.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass, field

from tierank.limits import (
    MAX_ID_BYTES,
    MAX_PASSAGE_BYTES,
    MAX_QUERY_BYTES,
    MAX_REQUEST_ID_BYTES,
    MAX_STUDY_SYSTEMS,
)
from tierank.server.errors import MAX_VIOLATIONS, FieldViolation
from tierank.v1 import study_pb2

# A study's inputs may hold thousands of problems; a client is told the first ones and how many
# more, in no more violations than an error shows (InvalidInput would cut the count off).
_ID_RULE = f"must be 1 to {MAX_ID_BYTES} bytes without white space or NUL"


def _bad_id(value: str) -> bool:
    return (
        not value
        or len(value.encode()) > MAX_ID_BYTES
        or "\0" in value
        or any(c.isspace() for c in value)
    )


class _Violations:
    """The first MAX_VIOLATIONS violations, and a count of the rest."""

    def __init__(self) -> None:
        self.listed: list[FieldViolation] = []
        self.more = 0

    def add(self, field_path: str, rule: str) -> None:
        if len(self.listed) < MAX_VIOLATIONS:
            self.listed.append(FieldViolation(field_path, rule))
        else:
            self.more += 1

    def result(self, room: int = MAX_VIOLATIONS) -> list[FieldViolation]:
        """At most `room` violations (at least one): the first ones, the last of them saying
        how many more there are when they do not all fit."""
        if len(self.listed) + self.more <= room:
            return list(self.listed)
        shown = self.listed[: max(room - 1, 0)]
        left = len(self.listed) + self.more - len(shown)
        return [*shown, FieldViolation("", f"and {left} more problems")]


def chunk_violations(request: study_pb2.AddStudyInputsRequest) -> list[FieldViolation]:
    """What is wrong with a chunk on its own (conflicts between chunks are found at the start)."""
    found = _Violations()
    if not request.request_id:
        found.add("request_id", "is required: it makes a resent chunk count once")
    elif len(request.request_id.encode()) > MAX_REQUEST_ID_BYTES or "\0" in request.request_id:
        found.add("request_id", f"must be at most {MAX_REQUEST_ID_BYTES} bytes, without NUL")
    for i, topic in enumerate(request.topics):
        if _bad_id(topic.query_id):
            found.add(f"topics[{i}].query_id", _ID_RULE)
        if not topic.text.strip():
            found.add(f"topics[{i}].text", "must not be empty")
        elif len(topic.text.encode()) > MAX_QUERY_BYTES or "\0" in topic.text:
            found.add(f"topics[{i}].text", f"must be at most {MAX_QUERY_BYTES} bytes, no NUL")
    for i, run in enumerate(request.runs):
        if _bad_id(run.system):
            found.add(f"runs[{i}].system", _ID_RULE)
        for j, entry in enumerate(run.entries):
            where = f"runs[{i}].entries[{j}]"
            if _bad_id(entry.query_id):
                found.add(f"{where}.query_id", _ID_RULE)
            if _bad_id(entry.doc_id):
                found.add(f"{where}.doc_id", _ID_RULE)
            if not math.isfinite(entry.score):
                found.add(f"{where}.score", "must be a finite number")
    for i, passage in enumerate(request.passages):
        if _bad_id(passage.doc_id):
            found.add(f"passages[{i}].doc_id", _ID_RULE)
        if not passage.text.strip():
            found.add(f"passages[{i}].text", "must not be empty")
        elif len(passage.text.encode()) > MAX_PASSAGE_BYTES:
            found.add(f"passages[{i}].text", f"must be at most {MAX_PASSAGE_BYTES} bytes")
    for i, judgment in enumerate(request.human_qrels):
        if _bad_id(judgment.query_id):
            found.add(f"human_qrels[{i}].query_id", _ID_RULE)
        if _bad_id(judgment.doc_id):
            found.add(f"human_qrels[{i}].doc_id", _ID_RULE)
    return found.result()


def later_chunk_violations(
    request: study_pb2.AddStudyInputsRequest, counts: study_pb2.StudyInputs
) -> list[FieldViolation]:
    """What a chunk sent after the study started may not hold: topics and human qrels (fixed
    at the start), or a run of a system already pooled (a run is added once, whole)."""
    pooled = {system for study_round in counts.rounds for system in study_round.systems}
    found = _Violations()
    if request.topics:
        found.add("topics", "a study's topics are fixed when it starts")
    if request.human_qrels:
        found.add("human_qrels", "are sent before the study starts")
    for i, run in enumerate(request.runs):
        if run.system in pooled:
            found.add(
                f"runs[{i}].system",
                f"{run.system!r} is pooled already: add a run once, under a name of its own",
            )
    return found.result()


def with_round(study_round: study_pb2.StudyRound) -> Callable[[bytes], bytes]:
    """The study's input counts (StudyInputs bytes) with `study_round` recorded: given to
    storage, which applies it under the study's lock as it starts or extends the study."""

    def record(stored: bytes) -> bytes:
        inputs = study_pb2.StudyInputs.FromString(stored)
        inputs.rounds.append(study_round)
        return inputs.SerializeToString()

    return record


def counter(request: study_pb2.AddStudyInputsRequest) -> Callable[[bytes], bytes | None]:
    """The study's input counts (StudyInputs bytes) with this chunk added, from the counts so
    far, or None for a chunk a study that has started may not take (later_chunk_violations):
    given to storage, which applies it under the study's lock."""

    def count(stored: bytes) -> bytes | None:
        inputs = study_pb2.StudyInputs.FromString(stored)
        if inputs.rounds and later_chunk_violations(request, inputs):
            return None
        inputs.topics += len(request.topics)
        systems = set(inputs.systems) | {run.system for run in request.runs}
        del inputs.systems[:]
        inputs.systems.extend(sorted(systems))
        inputs.run_entries += sum(len(run.entries) for run in request.runs)
        inputs.passages += len(request.passages)
        inputs.human_judgments += len(request.human_qrels)
        inputs.chunks += 1
        return inputs.SerializeToString()

    return count


@dataclass
class Passage:
    text: str
    metadata: dict[str, str]


@dataclass
class StudyInputs:
    """Everything the chunks hold, each conflict found (listed by `problems`)."""

    topics: dict[str, str] = field(default_factory=dict)
    # system -> query -> document -> score
    runs: dict[str, dict[str, dict[str, float]]] = field(default_factory=dict)
    passages: dict[str, Passage] = field(default_factory=dict)
    human: dict[str, dict[str, int]] = field(default_factory=dict)
    problems: _Violations = field(default_factory=_Violations)


def assemble(
    chunks: Iterable[bytes], *, passages: bool = True, systems: Collection[str] | None = None
) -> StudyInputs:
    """The chunks' inputs together (without passages unless asked: the report needs none;
    only the runs of `systems` where given)."""
    inputs = StudyInputs()
    for chunk_bytes in chunks:
        chunk = study_pb2.AddStudyInputsRequest.FromString(chunk_bytes)
        for topic in chunk.topics:
            known = inputs.topics.setdefault(topic.query_id, topic.text)
            if known != topic.text:
                inputs.problems.add(
                    "topics", f"query {topic.query_id!r} was sent with two different texts"
                )
        for run in chunk.runs:
            if systems is not None and run.system not in systems:
                continue
            queries = inputs.runs.setdefault(run.system, {})
            for entry in run.entries:
                scores = queries.setdefault(entry.query_id, {})
                if entry.doc_id in scores:
                    inputs.problems.add(
                        "runs",
                        f"{run.system} lists document {entry.doc_id!r} for query "
                        f"{entry.query_id!r} twice",
                    )
                scores[entry.doc_id] = entry.score
        if passages:
            for passage in chunk.passages:
                known_passage = inputs.passages.setdefault(
                    passage.doc_id, Passage(passage.text, dict(passage.metadata))
                )
                if known_passage.text != passage.text:
                    inputs.problems.add(
                        "passages", f"document {passage.doc_id!r} was sent with two texts"
                    )
        for judgment in chunk.human_qrels:
            grades = inputs.human.setdefault(judgment.query_id, {})
            if grades.setdefault(judgment.doc_id, judgment.grade) != judgment.grade:
                inputs.problems.add(
                    "human_qrels",
                    f"query {judgment.query_id!r} document {judgment.doc_id!r} has two grades",
                )
    if len(inputs.runs) > MAX_STUDY_SYSTEMS:
        inputs.problems.add("runs", f"at most {MAX_STUDY_SYSTEMS} systems")
    return inputs
