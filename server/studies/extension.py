"""Runs added to a study that has ended: what they add to its pools, and which queries are
judged again.

A run added later (AddStudyInputs on the ended study, then ExtendStudy) is pooled as the first
ones were (evaluation.pool_additions): only the documents of its top-d that no pool holds
(holes) need verdicts. A query with holes is judged again by a new job over its whole new pool
that starts from every verdict of its previous job (the row's `carried` outcome names that
job); a query that only the new runs retrieved anything for is judged like any other. The
other queries keep their jobs and labels. Made one query at a time from the study's scratch
inputs (the pooled systems' runs and the added ones), into the scratch's pools.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from tierank.evaluation import PooledDocument, judged_share, pool_additions, pool_runs
from tierank.limits import MAX_STUDY_QUERIES
from tierank.server.errors import MAX_VIOLATIONS, FieldViolation
from tierank.server.storage.base import StudyQueryRow
from tierank.server.studies.pools import query_pool
from tierank.server.studies.progress import ProgressBook, initial_progress
from tierank.server.studies.scratch import ScratchInputs
from tierank.v1 import rank_pb2, study_pb2


@dataclass(frozen=True)
class PlannedExtension:
    """The round; its queries (each row, `carried` set where a previous job's verdicts are
    reused, with its new pool) wait in the scratch's pools."""

    round: study_pb2.StudyRound
    # The study's progress as the round starts (StudyProgress bytes).
    progress: bytes


def pooled_systems(counts: study_pb2.StudyInputs) -> set[str]:
    """The systems the study's rounds have pooled."""
    return {system for study_round in counts.rounds for system in study_round.systems}


def plan_extension(
    scratch: ScratchInputs,
    pooled: set[str],
    added: Sequence[str],
    rows: Sequence[StudyQueryRow],
    depth: int,
    now: float,
) -> tuple[PlannedExtension | None, list[FieldViolation]]:
    """The round that judges the holes the `added` systems' runs make in the pools of the
    `pooled` ones (the scratch holds both), or what stops it: an added run's query without a
    topic, a new pooled document without a passage, too many queries, conflicting inputs."""
    by_query = {row.query_id: row for row in rows}
    last = max((row.position for row in rows), default=0)
    shares: dict[str, list[float]] = {system: [] for system in added}
    new_queries = extended = added_documents = pooled_documents = 0
    for qid, text in scratch.topics():
        runs = scratch.runs_of(qid)
        before = pool_runs({s: {qid: docs} for s, docs in runs.items() if s in pooled}, depth)
        pools = {qid: before.get(qid, [])}
        row = by_query.get(qid)
        if row is not None:
            # A query whose job left no tiers has no labels: none of its documents is judged.
            judged = {qid: {d.docid for d in pools[qid]}} if _has_labels(row) else {}
            for system in added:
                share = judged_share({qid: runs.get(system, {})}, judged, [qid])
                if share is not None:
                    shares[system].append(share)
        holes: list[PooledDocument] = []
        for system in added:
            additions = pool_additions(pools, {qid: runs.get(system, {})}, system, depth)
            holes += additions.added.get(qid, [])
            pools = additions.merged_into(pools)
        pool = pools.get(qid, [])
        pooled_documents += len(pool)
        if not holes:
            continue
        added_documents += len(holes)
        extended += 1
        passages = scratch.passages_of([document.docid for document in holes])
        passages.update(scratch.passages_of([d.docid for d in pool if d.docid not in passages]))
        if len(passages) < len(pool):
            scratch.note_missing([d.docid for d in holes if d.docid not in passages])
            continue
        if row is None:
            new_queries += 1
            row = StudyQueryRow(qid, last + new_queries, len(pool))
        else:
            carried = row.outcome if _has_labels(row) else b""
            row = StudyQueryRow(qid, row.position, len(pool), carried=carried)
        scratch.put_pool(row, query_pool(text, pool, passages))
    violations = _violations(scratch, len(by_query) + new_queries)
    if violations:
        return None, violations
    study_round = study_pb2.StudyRound(
        round=-1,  # set by the caller, which knows the rounds so far
        systems=added,
        queries_extended=extended,
        documents_added=added_documents,
        judged_before={s: sum(v) / len(v) for s, v in shares.items() if v},
    )
    study_round.start_time.FromNanoseconds(int(now * 1e9))
    total = len(by_query) + new_queries
    judged_again = {row.query_id: row for row in scratch.pool_rows()}
    every_row = [judged_again.pop(row.query_id, row) for row in rows]
    every_row += judged_again.values()
    book = ProgressBook.recounted(
        initial_progress(total, pooled_documents).SerializeToString(),
        (now, total - extended),
        every_row,
    )
    return PlannedExtension(study_round, book.to_bytes()), []


def _has_labels(row: StudyQueryRow) -> bool:
    """Whether the query's job left tiers to label it with (its verdicts are worth reusing)."""
    if not row.outcome:
        return False
    outcome = study_pb2.StudyQuery.FromString(row.outcome)
    return bool(outcome.job) and outcome.state != rank_pb2.JOB_STATE_FAILED


def _violations(scratch: ScratchInputs, total_queries: int) -> list[FieldViolation]:
    violations: list[FieldViolation] = []
    untitled, first_untitled = scratch.untitled()
    if untitled:
        violations.append(
            FieldViolation(
                "runs",
                f"{untitled} queries of the added runs have no topic (a study's topics are "
                f"fixed when it starts), e.g. {first_untitled}",
            )
        )
    missing, first_missing = scratch.missing()
    if missing:
        violations.append(
            FieldViolation(
                "passages",
                f"{missing} documents the added runs pool have no passage, e.g. {first_missing}",
            )
        )
    if total_queries > MAX_STUDY_QUERIES:
        violations.append(FieldViolation("runs", f"at most {MAX_STUDY_QUERIES:,} queries"))
    problems = scratch.problems()
    if violations or problems.listed:
        return violations + problems.result(MAX_VIOLATIONS - len(violations))
    return []
