"""A study's progress: what its queries' jobs ended with, summed as they end."""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence

from tierank.server.names import job_name
from tierank.server.storage.base import EventRow, JobRecord, StudyQueryRow, StudyStore
from tierank.v1 import rank_pb2, study_pb2


def outcome_of(row: StudyQueryRow, job: JobRecord, latest: EventRow | None) -> study_pb2.StudyQuery:
    """The query as its ended job left it: state, reason, judge calls, tokens, cost, rounds."""
    outcome = study_pb2.StudyQuery(
        query_id=row.query_id,
        job=job_name(job.job_id),
        state=job.state,  # type: ignore[arg-type]
        completion_reason=job.completion_reason,  # type: ignore[arg-type]
        pool_size=row.pool_size,
    )
    if latest is not None:
        event = rank_pb2.JobEvent.FromString(latest.payload)
        source = event.completed if event.HasField("completed") else event.tiers_updated
        stats = source.stats
        outcome.judge_calls = stats.judge_calls
        outcome.usage.input_tokens = stats.input_tokens
        outcome.usage.output_tokens = stats.output_tokens
        outcome.usage.cached_input_tokens = stats.cached_input_tokens
        outcome.usage.cost_usd = stats.cost_usd
        outcome.critical_path = stats.critical_path
        outcome.wall_seconds = stats.wall_seconds
    return outcome


def is_settled(outcome: study_pb2.StudyQuery) -> bool:
    return (
        outcome.state == rank_pb2.JOB_STATE_SUCCEEDED
        and outcome.completion_reason == rank_pb2.COMPLETION_REASON_SETTLED
    )


def initial_progress(queries: int, pooled_documents: int) -> study_pb2.StudyProgress:
    return study_pb2.StudyProgress(
        queries=queries, pending=queries, pooled_documents=pooled_documents
    )


class ProgressBook:
    """The study's StudyProgress, kept up to date by its driver."""

    def __init__(self, progress: study_pb2.StudyProgress, start_time: float) -> None:
        self.progress = progress
        self._start_time = start_time

    @classmethod
    def recounted(
        cls, stored: bytes, start_time: float, rows: Iterable[StudyQueryRow]
    ) -> ProgressBook:
        """The progress counted again from every query's row: where a driver takes a study up
        (after a restart or from another replica). What was last written can be older than its
        rows: a job is recorded before the progress that counts it started."""
        written = study_pb2.StudyProgress.FromString(stored)
        book = cls(initial_progress(written.queries, written.pooled_documents), start_time)
        for row in rows:
            if row.outcome:
                book.add(study_pb2.StudyQuery.FromString(row.outcome), had_job=False)
            elif row.job_id:
                book.started()
        return book

    def started(self) -> None:
        self.progress.pending -= 1
        self.progress.running += 1

    def add(self, outcome: study_pb2.StudyQuery, *, had_job: bool = True) -> None:
        """A query ended: its job's outcome (had_job), or it was never started."""
        progress = self.progress
        if had_job:
            progress.running = max(0, progress.running - 1)
        else:
            progress.pending = max(0, progress.pending - 1)
        if outcome.state == rank_pb2.JOB_STATE_FAILED:
            progress.failed += 1
        elif is_settled(outcome):
            progress.settled += 1
        else:
            progress.provisional += 1
        progress.judge_calls += outcome.judge_calls
        usage = progress.usage
        usage.input_tokens += outcome.usage.input_tokens
        usage.output_tokens += outcome.usage.output_tokens
        usage.cached_input_tokens += outcome.usage.cached_input_tokens
        usage.cost_usd += outcome.usage.cost_usd
        progress.critical_path = max(progress.critical_path, outcome.critical_path)

    def budget_left(
        self, budget: rank_pb2.Budget, live_assignments: Sequence[rank_pb2.JobSpec]
    ) -> rank_pb2.Budget:
        """The study's budget less what ended queries spent and live ones may still spend."""
        usage = self.progress.usage
        return rank_pb2.Budget(
            max_judge_calls=budget.max_judge_calls
            - self.progress.judge_calls
            - sum(a.budget.max_judge_calls for a in live_assignments),
            max_input_tokens=budget.max_input_tokens
            - usage.input_tokens
            - sum(a.budget.max_input_tokens for a in live_assignments),
            max_cost_usd=budget.max_cost_usd
            - usage.cost_usd
            - sum(a.budget.max_cost_usd for a in live_assignments),
        )

    def to_bytes(self, *, final: bool = False) -> bytes:
        """The progress with its estimate of the time left; `final`: the study has ended, and
        queries still not judged (a cancelled study's) never will be: no estimate."""
        progress = self.progress
        ended = progress.settled + progress.provisional + progress.failed
        left = progress.pending + progress.running
        progress.ClearField("eta_seconds")
        if not left:
            progress.eta_seconds = 0.0
        elif ended and not final:
            progress.eta_seconds = (time.time() - self._start_time) / ended * left
        return progress.SerializeToString()


# Queries read at once when all of a study's are wanted.
_QUERIES_PAGE = 1000


async def every_query(storage: StudyStore, study_id: str) -> list[StudyQueryRow]:
    """The study's queries in topic order, read a page at a time."""
    rows: list[StudyQueryRow] = []
    while page := await storage.study_queries(
        study_id, rows[-1].position if rows else 0, _QUERIES_PAGE
    ):
        rows.extend(page)
    return rows
