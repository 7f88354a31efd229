"""Runs added to a study that has ended: what they add to its pools, and which queries are
judged again.

A run added later (AddStudyInputs on the ended study, then ExtendStudy) is pooled as the first
ones were (evaluation.pool_additions): only the documents of its top-d that no pool holds
(holes) need verdicts. A query with holes is judged again by a new job over its whole new pool
that starts from every verdict of its previous job (the row's `carried` outcome names that
job); a query that only the new runs retrieved anything for is judged like any other. The
other queries keep their jobs and labels.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from tierank.evaluation import PooledDocument, judged_share, pool_additions, pool_runs
from tierank.limits import MAX_STUDY_QUERIES
from tierank.server.errors import MAX_VIOLATIONS, FieldViolation
from tierank.server.storage.base import StudyQueryRow
from tierank.server.studies.inputs import StudyInputs
from tierank.server.studies.pools import query_pool
from tierank.v1 import rank_pb2, study_pb2


@dataclass(frozen=True)
class PlannedExtension:
    # The queries judged in this round: each row (its `carried` set where a previous job's
    # verdicts are reused) with its new pool.
    queries: list[tuple[StudyQueryRow, bytes]]
    round: study_pb2.StudyRound
    # The study's queries and pooled documents with the round's.
    total_queries: int
    pooled_documents: int


def pooled_systems(counts: study_pb2.StudyInputs) -> set[str]:
    """The systems the study's rounds have pooled."""
    return {system for study_round in counts.rounds for system in study_round.systems}


def added_systems(inputs: StudyInputs, counts: study_pb2.StudyInputs) -> list[str]:
    """The systems whose runs were added since the study last ran."""
    return sorted(set(inputs.runs) - pooled_systems(counts))


def plan_extension(
    inputs: StudyInputs,
    counts: study_pb2.StudyInputs,
    rows: Sequence[StudyQueryRow],
    depth: int,
) -> tuple[PlannedExtension | None, list[FieldViolation]]:
    """The round that judges the added runs' holes (None when no run was added), or what
    stops it: a new run's query without a topic, a new pooled document without a passage,
    too many queries, conflicting inputs."""
    added = added_systems(inputs, counts)
    if not added:
        return None, []
    pooled = sorted(pooled_systems(counts) & set(inputs.runs))
    pools = pool_runs({system: inputs.runs[system] for system in pooled}, depth)
    by_query = {row.query_id: row for row in rows}
    judged = {
        qid: {document.docid for document in documents}
        for qid, documents in pools.items()
        if qid in by_query and _has_labels(by_query[qid])
    }
    judged_before = {
        system: judged_share(inputs.runs[system], judged, by_query) for system in added
    }
    holes: dict[str, list[PooledDocument]] = {}
    for system in added:
        additions = pool_additions(pools, inputs.runs[system], system, depth)
        for qid, documents in additions.added.items():
            holes.setdefault(qid, []).extend(documents)
        pools = additions.merged_into(pools)
    new_queries = [qid for qid in inputs.topics if qid in holes and qid not in by_query]
    violations = _violations(inputs, holes, by_query, len(rows) + len(new_queries))
    if violations:
        return None, violations
    queries: list[tuple[StudyQueryRow, bytes]] = []
    for row in rows:  # in topic order
        if row.query_id in holes:
            documents = pools[row.query_id]
            carried = row.outcome if _has_labels(row) else b""
            extended = StudyQueryRow(row.query_id, row.position, len(documents), carried=carried)
            queries.append((extended, query_pool(row.query_id, documents, inputs)))
    last = max((row.position for row in rows), default=0)
    for offset, qid in enumerate(new_queries, start=1):
        documents = pools[qid]
        row = StudyQueryRow(qid, last + offset, len(documents))
        queries.append((row, query_pool(qid, documents, inputs)))
    study_round = study_pb2.StudyRound(
        round=len(counts.rounds),
        systems=added,
        queries_extended=len(queries),
        documents_added=sum(len(documents) for documents in holes.values()),
        judged_before={
            system: share for system, share in judged_before.items() if share is not None
        },
    )
    pooled_documents = sum(len(documents) for qid, documents in pools.items() if qid in by_query)
    pooled_documents += sum(len(pools[qid]) for qid in new_queries)
    return (
        PlannedExtension(queries, study_round, len(rows) + len(new_queries), pooled_documents),
        [],
    )


def _has_labels(row: StudyQueryRow) -> bool:
    """Whether the query's job left tiers to label it with (its verdicts are worth reusing)."""
    if not row.outcome:
        return False
    outcome = study_pb2.StudyQuery.FromString(row.outcome)
    return bool(outcome.job) and outcome.state != rank_pb2.JOB_STATE_FAILED


def _violations(
    inputs: StudyInputs,
    holes: dict[str, list[PooledDocument]],
    by_query: dict[str, StudyQueryRow],
    total_queries: int,
) -> list[FieldViolation]:
    violations: list[FieldViolation] = []
    untitled = sorted(qid for qid in holes if qid not in by_query and qid not in inputs.topics)
    if untitled:
        violations.append(
            FieldViolation(
                "runs",
                f"{len(untitled)} queries of the added runs have no topic (a study's topics are "
                f"fixed when it starts), e.g. {untitled[:5]}",
            )
        )
    missing = sorted(
        {d.docid for documents in holes.values() for d in documents} - set(inputs.passages)
    )
    if missing:
        violations.append(
            FieldViolation(
                "passages",
                f"{len(missing)} documents the added runs pool have no passage, e.g. {missing[:5]}",
            )
        )
    if total_queries > MAX_STUDY_QUERIES:
        violations.append(FieldViolation("runs", f"at most {MAX_STUDY_QUERIES:,} queries"))
    if violations or inputs.problems.listed:
        return violations + inputs.problems.result(MAX_VIOLATIONS - len(violations))
    return []
