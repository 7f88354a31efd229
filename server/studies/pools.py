"""A study's queries at its start: TREC pooling of its runs, one pool (a job's query and
candidates) per query, and what is missing for it."""

from __future__ import annotations

from dataclasses import dataclass

from tierank.evaluation import PooledDocument, pool_runs
from tierank.limits import MAX_STUDY_QUERIES
from tierank.server.errors import MAX_VIOLATIONS, FieldViolation
from tierank.server.storage.base import StudyQueryRow
from tierank.server.studies.inputs import StudyInputs
from tierank.v1 import rank_pb2

# The candidate metadata key that says which systems retrieved a document, at what rank:
# "bm25:3 tasb:1". Shown in the job like any metadata; never shown to a judge.
RETRIEVED_BY_KEY = "retrieved_by"


@dataclass(frozen=True)
class PlannedQuery:
    row: StudyQueryRow
    # A JobSpec holding only the query and its candidates: the job's spec once the study's
    # ranking parameters, budget and deadline are added.
    pool: bytes


def plan_queries(
    inputs: StudyInputs, depth: int
) -> tuple[list[PlannedQuery], list[FieldViolation]]:
    """The study's queries in topic order (the order topics were sent), each with its pool;
    or what stops the study from starting: no run, a run's query without a topic, a pooled
    document without a passage, too many queries."""
    violations: list[FieldViolation] = []
    if not inputs.runs:
        violations.append(FieldViolation("runs", "a study needs at least one system's run"))
    pools = pool_runs(inputs.runs, depth) if inputs.runs else {}
    untitled = sorted(set(pools) - set(inputs.topics))
    if untitled:
        violations.append(
            FieldViolation(
                "topics",
                f"{len(untitled)} queries of the runs have no topic, e.g. {untitled[:5]}",
            )
        )
    missing = sorted({d.docid for pool in pools.values() for d in pool} - set(inputs.passages))
    if missing:
        violations.append(
            FieldViolation(
                "passages",
                f"{len(missing)} pooled documents have no passage, e.g. {missing[:5]}",
            )
        )
    order = [qid for qid in inputs.topics if qid in pools]
    if not order and inputs.runs and not untitled:
        violations.append(FieldViolation("runs", "no run retrieved anything for any topic"))
    if len(order) > MAX_STUDY_QUERIES:
        violations.append(FieldViolation("topics", f"at most {MAX_STUDY_QUERIES:,} queries"))
    if violations or inputs.problems.listed:
        # What is missing first: the conflicts between chunks may be many, and are cut short.
        room = MAX_VIOLATIONS - len(violations)
        return [], violations + inputs.problems.result(room)
    planned = []
    for position, qid in enumerate(order, start=1):
        row = StudyQueryRow(qid, position, len(pools[qid]))
        planned.append(PlannedQuery(row, query_pool(qid, pools[qid], inputs)))
    return planned, []


def query_pool(qid: str, documents: list[PooledDocument], inputs: StudyInputs) -> bytes:
    """The query's pool as a JobSpec holding its text and candidates (JobSpec bytes)."""
    pool = rank_pb2.JobSpec(
        query=inputs.topics[qid],
        candidates=[_candidate(document, inputs) for document in documents],
    )
    return pool.SerializeToString()


def _candidate(document: PooledDocument, inputs: StudyInputs) -> rank_pb2.Candidate:
    passage = inputs.passages[document.docid]
    metadata = dict(passage.metadata)
    metadata[RETRIEVED_BY_KEY] = " ".join(
        f"{system}:{rank}" for system, rank in sorted(document.retrieved_by.items())
    )
    return rank_pb2.Candidate(id=document.docid, text=passage.text, metadata=metadata)
