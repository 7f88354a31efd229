"""Quota rules and row shapes both storage backends share, so that they cannot drift apart."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tierank.resources import FINAL_JOB_STATES, STUDY_DRAFT, STUDY_RUNNING
from tierank.server.errors import QuotaExceeded
from tierank.server.storage.base import (
    LIMIT_NAMES,
    UNENDED_BATCH_STATES,
    BatchState,
    Limits,
    OperationRecord,
    ProviderBatchRecord,
    Spend,
    StudyQueryRow,
    StudyRecord,
    TenantRecord,
    UnfinishedCounts,
)

RATE_WINDOW_S = 60.0
# A retry hint of zero would invite a client to spin on a window that has not moved yet.
MIN_RETRY_AFTER_S = 0.01
# Costs are summed in floating point; without this slack ten reservations of $0.10 could fail
# a $1.00 limit by a rounding error.
COST_SLACK_USD = 1e-9

# A query for a tenant's unfinished jobs must repeat the predicate of the partial index
# jobs_unfinished word for word, or neither SQLite nor PostgreSQL can use the index, and scans
# every job the tenant ever had.
UNFINISHED_JOBS = f"state NOT IN ({', '.join(str(s) for s in sorted(FINAL_JOB_STATES))})"
# Likewise for studies and the partial index studies_unfinished.
UNFINISHED_STUDIES = f"state IN ({STUDY_DRAFT}, {STUDY_RUNNING})"
# Unfinished jobs and studies per tenant and state, in one statement (one round trip).
UNFINISHED_COUNTS = (
    f"SELECT 'jobs', tenant, state, COUNT(*) FROM jobs WHERE {UNFINISHED_JOBS} "
    "GROUP BY tenant, state UNION ALL "
    f"SELECT 'studies', tenant, state, COUNT(*) FROM studies WHERE {UNFINISHED_STUDIES} "
    "GROUP BY tenant, state"
)


def unfinished_counts_from(rows: Sequence[Sequence[Any]]) -> UnfinishedCounts:
    counts = UnfinishedCounts({}, {})
    for table, tenant, state, count in rows:
        (counts.jobs if table == "jobs" else counts.studies)[(tenant, state)] = count
    return counts


def tenant_from_row(row: Sequence[Any], provider_keys: Sequence[str]) -> TenantRecord:
    count = len(LIMIT_NAMES)
    allow, create_time, update_time = row[1 + count :]
    return TenantRecord(
        tenant=row[0],
        limits=Limits(*row[1 : 1 + count]),
        allow_server_provider_keys=bool(allow),
        create_time=create_time,
        update_time=update_time,
        provider_keys=tuple(provider_keys),
    )


def operation_from_row(row: Sequence[Any], error_message: str) -> OperationRecord:
    """An operation as both backends select it; `error_message` decoded by the backend."""
    (operation_id, tenant, request_id, digest, method, state, owner, created, updated) = row[:9]
    progress, result, error_code, _, cancel_requested = row[9:]
    return OperationRecord(
        operation_id,
        tenant,
        request_id,
        digest,
        method,
        state,
        owner,
        created,
        updated,
        progress=bytes(progress),
        result=bytes(result),
        error_code=error_code,
        error_message=error_message,
        cancel_requested=bool(cancel_requested),
    )


# Appended to a lookup by (tenant, request_id): the request indexes are partial (request_id <>
# ''), and a planner uses a partial index only where the query itself implies its predicate. A
# bound `request_id = ?` does not, and without this a lookup scans all of a tenant's rows (5 ms
# at 10,000 jobs, for every CreateJob with a request_id).
BY_REQUEST_INDEX = "AND request_id <> ''"

STUDY_COLUMNS = (
    "study_id, tenant, request_id, state, spec, create_time, update_time, start_time, "
    "end_time, inputs, progress, error_code, error_message, cancel_requested, report, "
    "trace_context"
)
STUDY_QUERY_COLUMNS = "query_id, position, pool_size, job_id, assignment, outcome, carried"


def study_query_from_row(row: Sequence[Any]) -> StudyQueryRow:
    """A study's query as both backends select it (STUDY_QUERY_COLUMNS)."""
    query_id, position, pool_size, job_id, assignment, outcome, carried = row
    return StudyQueryRow(
        query_id, position, pool_size, job_id, bytes(assignment), bytes(outcome), bytes(carried)
    )


def study_from_row(row: Sequence[Any], error_message: str | None = None) -> StudyRecord:
    """A study as both backends select it (STUDY_COLUMNS); `error_message` where the backend
    decodes it itself."""
    (study_id, tenant, request_id, state, spec, created, updated, started, ended) = row[:9]
    inputs, progress, error_code, stored_message, cancel_requested, report, trace = row[9:]
    return StudyRecord(
        study_id,
        tenant,
        request_id,
        state,
        bytes(spec),
        created,
        updated,
        started,
        ended,
        inputs=bytes(inputs),
        progress=bytes(progress),
        error_code=error_code,
        error_message=stored_message if error_message is None else error_message,
        cancel_requested=bool(cancel_requested),
        report=bytes(report),
        trace_context=trace,
    )


def tenant_changes(
    set_limits: Limits,
    clear_limits: Sequence[str],
    allow_server_provider_keys: bool | None,
    now: float,
) -> dict[str, Any]:
    """put_tenant's column -> new value, for both backends' UPDATE."""
    # Limit names become column names: only the known ones may get that far.
    unknown = sorted(set(clear_limits) - set(LIMIT_NAMES))
    if unknown:
        raise ValueError(f"unknown limits: {', '.join(unknown)}")
    changes: dict[str, Any] = dict(set_limits.given())
    changes.update(dict.fromkeys(clear_limits))
    if allow_server_provider_keys is not None:
        changes["allow_server_provider_keys"] = allow_server_provider_keys
    changes["update_time"] = now
    return changes


def spend_from_row(row: Sequence[Any]) -> Spend:
    calls, input_tokens, output_tokens, cost_usd = row
    return Spend(calls, input_tokens, output_tokens, float(cost_usd))


def plus(a: Spend, b: Spend) -> Spend:
    return Spend(
        a.calls + b.calls,
        a.input_tokens + b.input_tokens,
        a.output_tokens + b.output_tokens,
        a.cost_usd + b.cost_usd,
    )


def check_daily_limits(limits: Sequence[Any], spend: Spend) -> None:
    """`limits` is (daily_judge_calls, daily_input_tokens, daily_cost_usd), None for none."""
    calls, input_tokens, cost_usd = limits
    if calls is not None and spend.calls > calls:
        raise QuotaExceeded("daily_judge_calls", calls)
    if input_tokens is not None and spend.input_tokens > input_tokens:
        raise QuotaExceeded("daily_input_tokens", input_tokens)
    if cost_usd is not None and spend.cost_usd > cost_usd + COST_SLACK_USD:
        raise QuotaExceeded("daily_cost_usd", cost_usd)


# A provider batch's columns, in ProviderBatchRecord's order.
PROVIDER_BATCH_COLUMNS = (
    "batch_id, tenant, owner, provider, model, calls, create_time, state, vendor_id, "
    "vendor_status, counts, message, submit_time, update_time, end_time"
)
# States a batch never leaves.
FINAL_BATCH_STATES = (BatchState.ENDED.value, BatchState.FAILED.value)
# The same states as predicates on provider_batches.state, for both backends' statements.
UNENDED_BATCH = "state IN ({})".format(", ".join(f"'{s.value}'" for s in UNENDED_BATCH_STATES))
FINAL_BATCH = "state IN ({})".format(", ".join(f"'{state}'" for state in FINAL_BATCH_STATES))


def provider_batch_from_row(row: Sequence[Any], message: str | None = None) -> ProviderBatchRecord:
    """A provider batch as both backends select it (PROVIDER_BATCH_COLUMNS); `message` where
    the backend decodes it itself."""
    values = list(row)
    values[7] = BatchState(values[7])
    if message is not None:
        values[11] = message
    return ProviderBatchRecord(*values)
