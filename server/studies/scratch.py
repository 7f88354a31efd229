"""A study's inputs in a temporary SQLite file, loaded chunk by chunk, for its start and its
extensions to pool from one query at a time.

A study may hold 100,000 queries, several systems' runs of hundreds of documents each and
their passages: gigabytes as Python objects. Loaded here instead, the server holds one chunk
and SQLite's page cache (SCRATCH_CACHE_KIB) at a time, whatever the study's size, and the
pools it makes wait here too until storage takes them. The file is the server's own (under
the system's temporary directory), deleted when the scratch is closed.

The conflicts between chunks (a topic or passage sent with two texts, a run listing a document
twice, two human grades for one pair) are found here, by query over the loaded rows.
"""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
import tempfile
from collections.abc import AsyncIterator, Collection, Iterator
from dataclasses import dataclass

import anyio.to_thread

from tierank.limits import MAX_STUDY_SYSTEMS
from tierank.server.errors import ResourceExhausted
from tierank.server.storage.base import StudyQueryRow, StudyStore
from tierank.server.studies.inputs import Violations, chunk_pages
from tierank.v1 import study_pb2

# SQLite's page cache for the scratch file, in KiB: what loading and pooling hold in memory.
SCRATCH_CACHE_KIB = 8192
# Rows handed to SQLite at once while loading a chunk.
_INSERT_BATCH = 5000
# Documents looked up in one statement (SQLite allows 32,766 parameters).
_LOOKUP_BATCH = 500

_SCHEMA = """
CREATE TABLE topics (seq INTEGER PRIMARY KEY, qid TEXT NOT NULL, text TEXT NOT NULL);
CREATE TABLE entries (system TEXT NOT NULL, qid TEXT NOT NULL, doc TEXT NOT NULL,
    score REAL NOT NULL);
CREATE TABLE passages (seq INTEGER PRIMARY KEY, doc TEXT NOT NULL, text TEXT NOT NULL,
    metadata TEXT NOT NULL);
CREATE TABLE human (qid TEXT NOT NULL, doc TEXT NOT NULL, grade INTEGER NOT NULL);
CREATE TABLE sample (seq INTEGER PRIMARY KEY, qid TEXT NOT NULL, doc TEXT NOT NULL,
    grade INTEGER NOT NULL);
CREATE TABLE missing (doc TEXT PRIMARY KEY);
CREATE TABLE pools (position INTEGER PRIMARY KEY, qid TEXT NOT NULL, size INTEGER NOT NULL,
    pool BLOB NOT NULL, carried BLOB NOT NULL);
"""
_INDEXES = """
CREATE INDEX topics_qid ON topics (qid, seq);
CREATE INDEX entries_qid ON entries (qid, system, doc);
CREATE INDEX passages_doc ON passages (doc, seq);
CREATE INDEX human_pair ON human (qid, doc);
CREATE INDEX sample_pair ON sample (qid, doc, seq);
"""


@dataclass(frozen=True)
class Passage:
    text: str
    metadata: dict[str, str]


class ScratchInputs:
    """The chunks of one study, loaded (`add`, then `loaded`), read back by query."""

    def __init__(self, systems: Collection[str] | None = None) -> None:
        """`systems`: keep only the runs of these (None: every run)."""
        descriptor, self._path = tempfile.mkstemp(prefix="tierank-study-", suffix=".db")
        os.close(descriptor)
        # Used by one thread at a time: a worker thread loads it, storage's writer may read
        # the pools out of it.
        self._db = sqlite3.connect(self._path, check_same_thread=False, isolation_level=None)
        for pragma in ("journal_mode = OFF", "synchronous = OFF", "temp_store = FILE"):
            self._db.execute(f"PRAGMA {pragma}")
        self._db.execute(f"PRAGMA cache_size = -{SCRATCH_CACHE_KIB}")
        self._db.executescript(_SCHEMA)
        self._db.execute("BEGIN")
        self._wanted = systems
        self._systems: set[str] = set()

    def close(self) -> None:
        self._db.close()
        os.unlink(self._path)

    # -- loading --------------------------------------------------------------------------

    def add(self, chunk_bytes: bytes) -> None:
        """Load one AddStudyInputs chunk (its `request_id` already counted by storage)."""
        chunk = study_pb2.AddStudyInputsRequest.FromString(chunk_bytes)
        db = self._db
        db.executemany(
            "INSERT INTO topics (qid, text) VALUES (?, ?)",
            ((topic.query_id, topic.text) for topic in chunk.topics),
        )
        for run in chunk.runs:
            if self._wanted is not None and run.system not in self._wanted:
                continue
            self._systems.add(run.system)
            entries = run.entries
            for start in range(0, len(entries), _INSERT_BATCH):
                db.executemany(
                    "INSERT INTO entries VALUES (?, ?, ?, ?)",
                    (
                        (run.system, entry.query_id, entry.doc_id, entry.score)
                        for entry in entries[start : start + _INSERT_BATCH]
                    ),
                )
        db.executemany(
            "INSERT INTO passages (doc, text, metadata) VALUES (?, ?, ?)",
            (
                (p.doc_id, p.text, json.dumps(dict(p.metadata), sort_keys=True))
                for p in chunk.passages
            ),
        )
        db.executemany(
            "INSERT INTO human VALUES (?, ?, ?)",
            ((j.query_id, j.doc_id, j.grade) for j in chunk.human_qrels),
        )
        db.executemany(
            "INSERT INTO sample (qid, doc, grade) VALUES (?, ?, ?)",
            ((j.query_id, j.doc_id, j.grade) for j in chunk.human_sample),
        )

    def loaded(self) -> None:
        """Every chunk is in: index what is read back by query and by document."""
        self._db.executescript(_INDEXES)  # commits what was loaded first
        self._db.execute("BEGIN")  # the pools made next: one transaction, never committed

    # -- what the chunks hold -------------------------------------------------------------

    def problems(self) -> Violations:
        """The conflicts between chunks, and too many systems."""
        found = Violations()
        db = self._db
        for (qid,) in db.execute(
            "SELECT qid FROM topics GROUP BY qid HAVING COUNT(DISTINCT text) > 1 ORDER BY MIN(seq)"
        ):
            found.add("topics", f"query {qid!r} was sent with two different texts")
        for system, qid, doc in db.execute(
            "SELECT system, qid, doc FROM entries GROUP BY system, qid, doc HAVING COUNT(*) > 1 "
            "ORDER BY system, qid, doc"
        ):
            found.add("runs", f"{system} lists document {doc!r} for query {qid!r} twice")
        for (doc,) in db.execute(
            "SELECT doc FROM passages GROUP BY doc HAVING COUNT(DISTINCT text) > 1 "
            "ORDER BY MIN(seq)"
        ):
            found.add("passages", f"document {doc!r} was sent with two texts")
        for qid, doc in db.execute(
            "SELECT qid, doc FROM human GROUP BY qid, doc HAVING COUNT(DISTINCT grade) > 1 "
            "ORDER BY qid, doc"
        ):
            found.add("human_qrels", f"query {qid!r} document {doc!r} has two grades")
        if len(self.systems()) > MAX_STUDY_SYSTEMS:
            found.add("runs", f"at most {MAX_STUDY_SYSTEMS} systems")
        return found

    def systems(self) -> list[str]:
        """The systems whose runs were loaded, by name."""
        return sorted(self._systems)

    def topics(self) -> Iterator[tuple[str, str]]:
        """(query id, text) in the order the topics were sent; a query's first text."""
        yield from self._db.execute(
            "SELECT qid, text FROM topics WHERE seq IN (SELECT MIN(seq) FROM topics GROUP BY "
            "qid) ORDER BY seq"
        )

    def untitled(self) -> tuple[int, list[str]]:
        """How many of the runs' queries have no topic, and the first few of them."""
        sql = "SELECT DISTINCT qid FROM entries WHERE qid NOT IN (SELECT qid FROM topics)"
        (count,) = self._db.execute(f"SELECT COUNT(*) FROM ({sql})").fetchone()
        return count, [row[0] for row in self._db.execute(f"{sql} ORDER BY qid LIMIT 5")]

    def runs_of(self, qid: str) -> dict[str, dict[str, float]]:
        """Each system's scored documents for the query: system -> document -> score."""
        runs: dict[str, dict[str, float]] = {}
        for system, doc, score in self._db.execute(
            "SELECT system, doc, score FROM entries WHERE qid = ?", (qid,)
        ):
            runs.setdefault(system, {})[doc] = score
        return runs

    def human_queries(self) -> set[str]:
        """The queries the human qrels judge."""
        return {row[0] for row in self._db.execute("SELECT DISTINCT qid FROM human")}

    def sample_queries(self) -> list[str]:
        """The queries of the human sample, by id."""
        return [row[0] for row in self._db.execute("SELECT DISTINCT qid FROM sample ORDER BY qid")]

    def sample_of(self, qid: str) -> dict[str, int] | None:
        """The human sample's grades of the query (None where the sample has none); a pair
        graded again in a later chunk takes its latest grade (a corrected labelling sheet)."""
        grades = dict(
            self._db.execute("SELECT doc, grade FROM sample WHERE qid = ? ORDER BY seq", (qid,))
        )
        return grades or None

    def human_of(self, qid: str) -> dict[str, int] | None:
        """The query's human grades (None where the human qrels do not judge it)."""
        grades = dict(self._db.execute("SELECT doc, grade FROM human WHERE qid = ?", (qid,)))
        return grades or None

    def passages_of(self, docs: Collection[str]) -> dict[str, Passage]:
        """The passages of `docs` that were sent (a document's first)."""
        found: dict[str, Passage] = {}
        wanted = list(docs)
        for start in range(0, len(wanted), _LOOKUP_BATCH):
            batch = wanted[start : start + _LOOKUP_BATCH]
            # Descending: a document sent twice (with the same text) keeps its first metadata.
            for doc, text, metadata in self._db.execute(
                f"SELECT doc, text, metadata FROM passages WHERE doc IN "
                f"({', '.join('?' * len(batch))}) ORDER BY seq DESC",
                batch,
            ):
                found[doc] = Passage(text, json.loads(metadata))
        return found

    def note_missing(self, docs: Collection[str]) -> None:
        """Remember pooled documents that have no passage."""
        self._db.executemany("INSERT OR IGNORE INTO missing VALUES (?)", ((d,) for d in docs))

    def missing(self) -> tuple[int, list[str]]:
        (count,) = self._db.execute("SELECT COUNT(*) FROM missing").fetchone()
        return count, [
            row[0] for row in self._db.execute("SELECT doc FROM missing ORDER BY doc LIMIT 5")
        ]

    # -- the pools made from them -----------------------------------------------------------

    def put_pool(self, row: StudyQueryRow, pool: bytes) -> None:
        self._db.execute(
            "INSERT INTO pools VALUES (?, ?, ?, ?, ?)",
            (row.position, row.query_id, row.pool_size, pool, row.carried),
        )

    def first_pool(self) -> bytes:
        row = self._db.execute("SELECT pool FROM pools ORDER BY position LIMIT 1").fetchone()
        return bytes(row[0]) if row else b""

    def pool_rows(self) -> Iterator[StudyQueryRow]:
        """The rows of the pools made, in position order."""
        for position, qid, size, carried in self._db.execute(
            "SELECT position, qid, size, carried FROM pools ORDER BY position"
        ):
            yield StudyQueryRow(qid, position, size, carried=bytes(carried))

    def pools(self) -> Iterator[tuple[StudyQueryRow, bytes]]:
        """Every pool made, in position order, with its query's row, read as it is taken."""
        for position, qid, size, pool, carried in self._db.execute(
            "SELECT position, qid, size, pool, carried FROM pools ORDER BY position"
        ):
            yield StudyQueryRow(qid, position, size, carried=bytes(carried)), bytes(pool)


@contextlib.asynccontextmanager
async def open_scratch(
    storage: StudyStore, study_id: str, systems: Collection[str] | None = None
) -> AsyncIterator[ScratchInputs]:
    """The study's chunks in a scratch (the runs of `systems` only, where given), read from
    storage a few at a time and loaded in a worker thread, indexed; closed (its file deleted)
    when the block ends. A scratch file that cannot be written (the temporary directory full)
    is RESOURCE_EXHAUSTED, and the study stays as it was."""
    try:
        scratch = await anyio.to_thread.run_sync(ScratchInputs, systems)
    except (OSError, sqlite3.Error) as error:
        raise _scratch_failed(error) from None
    try:
        async for page in chunk_pages(storage, study_id):
            for chunk in page:
                await anyio.to_thread.run_sync(scratch.add, chunk)
        await anyio.to_thread.run_sync(scratch.loaded)
        yield scratch
    except sqlite3.Error as error:
        raise _scratch_failed(error) from None
    finally:
        scratch.close()


def _scratch_failed(error: OSError | sqlite3.Error) -> ResourceExhausted:
    return ResourceExhausted(
        f"the server could not hold the study's inputs in its temporary directory "
        f"({tempfile.gettempdir()}): {error}",
        "SCRATCH_UNAVAILABLE",
    )
