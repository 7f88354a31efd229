"""A study's queries at its start: TREC pooling of its runs, one pool (a job's query and
candidates) per query, made one query at a time from the study's scratch inputs, and what is
missing for it."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from tierank.evaluation import PooledDocument, pool_runs
from tierank.limits import MAX_STUDY_QUERIES
from tierank.server.errors import MAX_VIOLATIONS, FieldViolation
from tierank.server.storage.base import StudyQueryRow
from tierank.server.studies.scratch import Passage, ScratchInputs
from tierank.v1 import rank_pb2

# The candidate metadata key that says which systems retrieved a document, at what rank:
# "bm25:3 tasb:1". Shown in the job like any metadata; never shown to a judge.
RETRIEVED_BY_KEY = "retrieved_by"


@dataclass(frozen=True)
class Pooled:
    queries: int
    documents: int


def plan_queries(scratch: ScratchInputs, depth: int) -> tuple[Pooled | None, list[FieldViolation]]:
    """Pool every query of `scratch` (in topic order: the order topics were sent) into its
    pools; returns how many queries and documents, or what stops the study from starting: no
    run, a run's query without a topic, a pooled document without a passage, too many
    queries, conflicting inputs."""
    violations: list[FieldViolation] = []
    systems = scratch.systems()
    if not systems:
        violations.append(FieldViolation("runs", "a study needs at least one system's run"))
    untitled, first_untitled = scratch.untitled()
    if untitled:
        violations.append(
            FieldViolation(
                "topics", f"{untitled} queries of the runs have no topic, e.g. {first_untitled}"
            )
        )
    position = pooled = 0
    for qid, text in scratch.topics():
        runs = scratch.runs_of(qid)
        if not runs:
            continue
        position += 1
        pool = pool_runs({system: {qid: docs} for system, docs in runs.items()}, depth)[qid]
        pooled += len(pool)
        passages = scratch.passages_of([document.docid for document in pool])
        if len(passages) < len(pool):
            scratch.note_missing([d.docid for d in pool if d.docid not in passages])
        elif position <= MAX_STUDY_QUERIES:
            row = StudyQueryRow(qid, position, len(pool))
            scratch.put_pool(row, query_pool(text, pool, passages))
    missing, first_missing = scratch.missing()
    if missing:
        violations.append(
            FieldViolation(
                "passages", f"{missing} pooled documents have no passage, e.g. {first_missing}"
            )
        )
    if not position and systems and not untitled:
        violations.append(FieldViolation("runs", "no run retrieved anything for any topic"))
    if position > MAX_STUDY_QUERIES:
        violations.append(FieldViolation("topics", f"at most {MAX_STUDY_QUERIES:,} queries"))
    problems = scratch.problems()
    if violations or problems.listed:
        # What is missing first: the conflicts between chunks may be many, and are cut short.
        return None, violations + problems.result(MAX_VIOLATIONS - len(violations))
    return Pooled(position, pooled), []


def query_pool(
    text: str, documents: list[PooledDocument], passages: Mapping[str, Passage]
) -> bytes:
    """The query's pool as a JobSpec holding its text and candidates (JobSpec bytes)."""
    pool = rank_pb2.JobSpec(
        query=text,
        candidates=[_candidate(document, passages[document.docid]) for document in documents],
    )
    return pool.SerializeToString()


def _candidate(document: PooledDocument, passage: Passage) -> rank_pb2.Candidate:
    metadata = dict(passage.metadata)
    metadata[RETRIEVED_BY_KEY] = " ".join(
        f"{system}:{rank}" for system, rank in sorted(document.retrieved_by.items())
    )
    return rank_pb2.Candidate(id=document.docid, text=passage.text, metadata=metadata)
