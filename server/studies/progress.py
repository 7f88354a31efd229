"""A study's progress: what its queries' jobs ended with, summed as they end."""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence

from tierank.server.names import BadName, job_name, parse_job_name
from tierank.server.storage.base import (
    EventRow,
    JobRecord,
    StudyQueryRow,
    StudyRecord,
    StudyStore,
)
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
        outcome.usage.cache_write_input_tokens = stats.cache_write_input_tokens
        outcome.usage.cost_usd = stats.cost_usd
        outcome.critical_path = stats.critical_path
        outcome.wall_seconds = stats.wall_seconds
    return outcome


def judged_something(outcome: study_pb2.StudyQuery, latest: EventRow) -> bool:
    """Whether the query's job learned anything of its pool's order: it settled (a pool of
    one document needs no call), or some judge call of it was answered. A job whose every
    call failed holds only the pool's input order, which is no judgment at all."""
    if is_settled(outcome):
        return True
    event = rank_pb2.JobEvent.FromString(latest.payload)
    stats = (event.completed if event.HasField("completed") else event.tiers_updated).stats
    return stats.judge_calls - stats.failed_calls - stats.abandoned_calls > 0


def listwise_spend(outcome: study_pb2.StudyQuery) -> study_pb2.StudyQuery:
    """What the query's job itself spent: its outcome less its pointwise probes (a job that
    continues it replays its verdicts, not its probes)."""
    spent = study_pb2.StudyQuery()
    spent.judge_calls = outcome.judge_calls - outcome.pointwise_calls
    usage, probes = outcome.usage, outcome.pointwise_usage
    spent.usage.input_tokens = usage.input_tokens - probes.input_tokens
    spent.usage.output_tokens = usage.output_tokens - probes.output_tokens
    spent.usage.cost_usd = usage.cost_usd - probes.cost_usd
    return spent


def carried_outcome(row: StudyQueryRow) -> study_pb2.StudyQuery | None:
    """What the query's previous job ended with, for a query judged again after the study was
    extended (its next job starts from that job's verdicts); None for any other query."""
    return study_pb2.StudyQuery.FromString(row.carried) if row.carried else None


def labelling_job(row: StudyQueryRow) -> str:
    """The id of the job whose tiers label the query now: its job, or while a query judged
    again has none yet, its previous one; empty for a query never judged."""
    if row.job_id:
        return row.job_id
    carried = carried_outcome(row)
    if carried is None or not carried.job:
        return ""
    try:
        return parse_job_name(carried.job)
    except BadName:  # written by this server: never
        return ""


def add_usage(total: rank_pb2.Usage, more: rank_pb2.Usage, sign: int = 1) -> None:
    """`total` += sign * `more`, field by field (latency is not summed: it is per call)."""
    total.input_tokens += sign * more.input_tokens
    total.output_tokens += sign * more.output_tokens
    total.cached_input_tokens += sign * more.cached_input_tokens
    total.cache_write_input_tokens += sign * more.cache_write_input_tokens
    total.cost_usd += sign * more.cost_usd


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
    """The study's StudyProgress, kept up to date by its driver.

    A query judged again after an extension counts what its previous job spent (`carried`)
    until its next job ends, whose stats include those calls (it starts from their verdicts):
    the totals count every call once, and a study's budget counts them as spent.
    """

    def __init__(
        self, progress: study_pb2.StudyProgress, start_time: float, ended_before: int = 0
    ) -> None:
        """`start_time` and `ended_before`: when this round of the study began and how many
        of its queries had ended by then, what its pace (the ETA) is measured from."""
        self.progress = progress
        self._start_time = start_time
        self._ended_before = ended_before

    @classmethod
    def recounted(
        cls, stored: bytes, round_start: tuple[float, int], rows: Iterable[StudyQueryRow]
    ) -> ProgressBook:
        """The progress counted again from every query's row: where a driver takes a study up
        (after a restart or from another replica), and where a study is extended. What was
        last written can be older than its rows: a job is recorded before the progress that
        counts it started."""
        written = study_pb2.StudyProgress.FromString(stored)
        book = cls(initial_progress(written.queries, written.pooled_documents), *round_start)
        for row in rows:
            carried = carried_outcome(row)
            if carried is not None:
                book._count_usage(carried, 1)
            if row.outcome:
                book.add(study_pb2.StudyQuery.FromString(row.outcome), had_job=False, row=row)
            elif row.job_id:
                book.started()
        return book

    def started(self) -> None:
        self.progress.pending -= 1
        self.progress.running += 1

    def add(
        self,
        outcome: study_pb2.StudyQuery,
        *,
        had_job: bool = True,
        row: StudyQueryRow | None = None,
    ) -> None:
        """The query of `row` ended: its job's outcome (had_job), or it was never started."""
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
        carried = carried_outcome(row) if row is not None else None
        if carried is not None:
            self._count_usage(carried, -1)
        self._count_usage(outcome, 1)
        progress.critical_path = max(progress.critical_path, outcome.critical_path)

    def _count_usage(self, outcome: study_pb2.StudyQuery, sign: int) -> None:
        progress = self.progress
        progress.judge_calls += sign * outcome.judge_calls
        progress.pointwise_calls += sign * outcome.pointwise_calls
        add_usage(progress.usage, outcome.usage, sign)
        add_usage(progress.pointwise_usage, outcome.pointwise_usage, sign)

    def reopened(self, outcome: study_pb2.StudyQuery) -> None:
        """An ended query is judged on (a top-up): it waits again, what it spent still counted
        (as its carried outcome) until its next job ends."""
        progress = self.progress
        if outcome.state == rank_pb2.JOB_STATE_FAILED:
            progress.failed -= 1
        elif is_settled(outcome):
            progress.settled -= 1
        else:
            progress.provisional -= 1
        progress.pending += 1

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
        ended = progress.settled + progress.provisional + progress.failed - self._ended_before
        left = progress.pending + progress.running
        progress.ClearField("eta_seconds")
        if not left:
            progress.eta_seconds = 0.0
        elif ended > 0 and not final:
            progress.eta_seconds = (time.time() - self._start_time) / ended * left
        return progress.SerializeToString()


def round_start(record: StudyRecord) -> tuple[float, int]:
    """When the study's latest round began, and how many of its queries had ended by then
    (all but those an extension judges)."""
    rounds = study_pb2.StudyInputs.FromString(record.inputs).rounds
    if len(rounds) < 2:
        return record.start_time, 0
    queries = study_pb2.StudyProgress.FromString(record.progress).queries
    latest = rounds[-1]
    return latest.start_time.ToNanoseconds() / 1e9, queries - latest.queries_extended


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
