"""A study's inputs, read from the user's files (`tierank.client._inputs`, the command line's one
reader), cut into AddStudyInputs chunks.

Chunks are cut by their encoded size, well under gRPC's default 4 MiB message limit, and each
has a request_id made of a prefix and a digest of its content, so that an upload that is
started again (with the same files, or with more of them) sends the same chunks under the same
ids and the server adds none twice.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field

from tierank.evaluation import Qrels, Run, pool_runs
from tierank.v1 import study_pb2

# Each chunk's encoded size stays under this: a quarter of gRPC's default receive limit, so that
# a server with the default accepts it with room to spare.
CHUNK_BYTES = 1024 * 1024
# Bytes a repeated field's tag and length prefix add to an item, at most (a 1 MiB item's
# length takes 3 bytes): counted generously, the chunk stays under CHUNK_BYTES.
_FIELD_OVERHEAD_BYTES = 8
# Hex digits of a chunk's SHA-256 in its request_id: 128 bits, no collision between chunks.
_DIGEST_CHARS = 32


@dataclass
class StudyFiles:
    """What a study is made of, read from files."""

    topics: dict[str, str]
    runs: dict[str, Run]
    passages: dict[str, tuple[str, dict[str, str]]] = field(default_factory=dict)
    human: Qrels = field(default_factory=dict)
    sample: Qrels = field(default_factory=dict)


def pooled_documents(runs: Mapping[str, Run], depth: int) -> set[str]:
    """The documents the server will pool: every run's top `depth` of each query."""
    return {d.docid for pool in pool_runs(runs, depth).values() for d in pool}


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
