"""A study's inputs as they arrive: each chunk checked at the API edge on its own and counted.

Chunks are stored as they were sent (AddStudyInputsRequest bytes): a study's start loads them
again (scratch.ScratchInputs, where the conflicts between them are found), so nothing but the
counts is computed while a client uploads.
"""

from __future__ import annotations

import math
import re
from collections.abc import AsyncIterator, Callable

from tierank.limits import (
    MAX_GRADE,
    MAX_HUMAN_GRADE,
    MAX_ID_BYTES,
    MAX_PASSAGE_BYTES,
    MAX_QUERY_BYTES,
    MAX_REQUEST_ID_BYTES,
    MIN_GRADE,
    MIN_HUMAN_GRADE,
)
from tierank.server.errors import (
    MAX_VIOLATIONS,
    NUL,
    NUL_RULE,
    FieldViolation,
    metadata_nul_violations,
)
from tierank.server.storage.base import StudyStore
from tierank.v1 import study_pb2

# A study's inputs may hold thousands of problems; a client is told the first ones and how many
# more, in no more violations than an error shows (InvalidInput would cut the count off).
_ID_RULE = f"must be 1 to {MAX_ID_BYTES} bytes without white space or NUL"


# White space (str.isspace's: a str pattern's \s is the same class) or NUL.
_UNFIT_IN_ID = re.compile(r"[\s\x00]")


def _bad_id(value: str) -> bool:
    # A chunk's hot loop (two ids a run entry): a regular expression rather than a Python loop
    # over the characters, and no encoding where the length is the size (ASCII, known in O(1)).
    size = len(value) if value.isascii() else len(value.encode())
    return not 0 < size <= MAX_ID_BYTES or _UNFIT_IN_ID.search(value) is not None


class Violations:
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
    found = Violations()
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
        elif NUL in passage.text:
            found.add(f"passages[{i}].text", NUL_RULE)
        for violation in metadata_nul_violations(f"passages[{i}].metadata", passage.metadata):
            found.add(violation.field, violation.rule)
    for name, judgments, lowest, highest, scale in (
        ("human_qrels", request.human_qrels, MIN_HUMAN_GRADE, MAX_HUMAN_GRADE, "human qrels"),
        ("human_sample", request.human_sample, MIN_GRADE, MAX_GRADE, "the study's labels"),
    ):
        for i, judgment in enumerate(judgments):
            if _bad_id(judgment.query_id):
                found.add(f"{name}[{i}].query_id", _ID_RULE)
            if _bad_id(judgment.doc_id):
                found.add(f"{name}[{i}].doc_id", _ID_RULE)
            if not lowest <= judgment.grade <= highest:
                found.add(
                    f"{name}[{i}].grade",
                    f"must be between {lowest} and {highest} (the grades of {scale}),"
                    f" not {judgment.grade}",
                )
    return found.result()


def later_chunk_violations(
    request: study_pb2.AddStudyInputsRequest, counts: study_pb2.StudyInputs
) -> list[FieldViolation]:
    """What a chunk sent after the study started may not hold: topics and human qrels (fixed
    at the start), or a run of a system already pooled (a run is added once, whole). A human
    sample may come later (CalibrateStudy applies it)."""
    pooled = {system for study_round in counts.rounds for system in study_round.systems}
    found = Violations()
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
        inputs.human_sample_judgments += len(request.human_sample)
        inputs.chunks += 1
        return inputs.SerializeToString()

    return count


# Chunks read from storage at once (each at most a few MiB).
_CHUNKS_READ = 4


async def chunk_pages(storage: StudyStore, study_id: str) -> AsyncIterator[list[bytes]]:
    """The study's chunks as sent, a few at a time: never all of them in memory at once."""
    read = 0
    while page := await storage.read_study_chunks(study_id, read, _CHUNKS_READ):
        read += len(page)
        yield page
