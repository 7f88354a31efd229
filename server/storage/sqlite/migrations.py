"""The SQLite schema, as numbered migrations, and how they are applied when a database opens.

A migration is never edited once released: a schema change is a new migration at the end.
`PRAGMA user_version` is the number of the last migration a database has; the migrations it
lacks are applied in one transaction that also sets the new number, so a failed migration leaves
nothing half done. A database with a number this code does not know (a newer release wrote it)
is refused before anything is written to it.

Databases made before migrations were numbered (user_version 0) hold some earlier part of the
first migration: the tables of their release, without the tables and columns added since. The
first migration therefore creates only what is missing (IF NOT EXISTS) and adds the missing
columns; every later migration is plain DDL, run on a database whose layout its number tells.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from tierank.server.errors import StorageError
from tierank.server.storage.rules import UNFINISHED_JOBS, UNFINISHED_STUDIES


@dataclass(frozen=True)
class Migration:
    version: int
    description: str
    sql: str
    # (table, column, declaration) to add where the table lacks the column: only the first
    # migration has any, for the tables of databases made before versions were numbered.
    missing_columns: tuple[tuple[str, str, str], ...] = ()


# The schema as it was when migrations were first numbered.
_INITIAL = f"""
CREATE TABLE IF NOT EXISTS jobs (
    job_id TEXT PRIMARY KEY,
    tenant TEXT NOT NULL,
    request_id TEXT NOT NULL,
    state INTEGER NOT NULL,
    spec BLOB NOT NULL,
    query TEXT NOT NULL,
    candidate_count INTEGER NOT NULL,
    create_time REAL NOT NULL,
    update_time REAL NOT NULL,
    last_sequence INTEGER NOT NULL DEFAULT 0,
    completion_reason INTEGER NOT NULL DEFAULT 0,
    error_code INTEGER NOT NULL DEFAULT 0,
    error_message TEXT NOT NULL DEFAULT '',
    trace_context TEXT NOT NULL DEFAULT ''
);
CREATE UNIQUE INDEX IF NOT EXISTS jobs_request ON jobs (tenant, request_id)
    WHERE request_id != '';
CREATE INDEX IF NOT EXISTS jobs_state ON jobs (state);
CREATE TABLE IF NOT EXISTS events (
    job_id TEXT NOT NULL,
    sequence INTEGER NOT NULL,
    kind TEXT NOT NULL,
    time REAL NOT NULL,
    payload BLOB NOT NULL,
    PRIMARY KEY (job_id, sequence)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS events_kind ON events (job_id, kind, sequence);
CREATE TABLE IF NOT EXISTS journal (
    job_id TEXT NOT NULL,
    idx INTEGER NOT NULL,
    kind TEXT NOT NULL,
    payload BLOB NOT NULL,
    PRIMARY KEY (job_id, idx)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS verdict_cache (
    key TEXT PRIMARY KEY,
    payload BLOB NOT NULL
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS verdict_audit (
    job_id TEXT NOT NULL,
    call_id TEXT NOT NULL,
    verdict BLOB NOT NULL,
    prompt TEXT NOT NULL,
    raw_answer TEXT NOT NULL,
    PRIMARY KEY (job_id, call_id)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS jobs_created ON jobs (tenant, create_time);
CREATE INDEX IF NOT EXISTS jobs_unfinished ON jobs (tenant) WHERE {UNFINISHED_JOBS};
CREATE TABLE IF NOT EXISTS tenants (
    tenant TEXT PRIMARY KEY,
    max_concurrent_jobs INTEGER,
    max_candidates INTEGER,
    max_watchers INTEGER,
    jobs_per_minute INTEGER,
    daily_judge_calls INTEGER,
    daily_input_tokens INTEGER,
    daily_cost_usd REAL,
    allow_server_provider_keys INTEGER NOT NULL DEFAULT 1,
    create_time REAL NOT NULL,
    update_time REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS api_keys (
    key_id TEXT PRIMARY KEY,
    tenant TEXT NOT NULL,
    role TEXT NOT NULL,
    display_name TEXT NOT NULL,
    secret_hash BLOB NOT NULL,
    create_time REAL NOT NULL,
    revoke_time REAL,
    certificate_subject TEXT NOT NULL DEFAULT ''
);
CREATE INDEX IF NOT EXISTS api_keys_tenant ON api_keys (tenant, create_time);
CREATE INDEX IF NOT EXISTS api_keys_subject ON api_keys (certificate_subject, create_time)
    WHERE certificate_subject != '';
CREATE TABLE IF NOT EXISTS provider_keys (
    tenant TEXT NOT NULL,
    provider TEXT NOT NULL,
    sealed BLOB NOT NULL,
    PRIMARY KEY (tenant, provider)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS usage (
    tenant TEXT NOT NULL,
    day TEXT NOT NULL,
    judge TEXT NOT NULL,
    calls INTEGER NOT NULL,
    input_tokens INTEGER NOT NULL,
    output_tokens INTEGER NOT NULL,
    cost_usd REAL NOT NULL,
    PRIMARY KEY (tenant, day, judge)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS reservations (
    reservation_id TEXT PRIMARY KEY,
    tenant TEXT NOT NULL,
    day TEXT NOT NULL,
    judge TEXT NOT NULL,
    calls INTEGER NOT NULL,
    input_tokens INTEGER NOT NULL,
    output_tokens INTEGER NOT NULL,
    cost_usd REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS reservations_day ON reservations (tenant, day);
CREATE TABLE IF NOT EXISTS qualifications (
    qualification_id TEXT PRIMARY KEY,
    tenant TEXT NOT NULL,
    judge_identity TEXT NOT NULL,
    create_time REAL NOT NULL,
    usable INTEGER NOT NULL,
    weight REAL NOT NULL,
    payload BLOB NOT NULL
);
CREATE INDEX IF NOT EXISTS qualifications_judge
    ON qualifications (tenant, judge_identity, create_time);
CREATE INDEX IF NOT EXISTS qualifications_tenant ON qualifications (tenant, create_time);
CREATE TABLE IF NOT EXISTS operations (
    operation_id TEXT PRIMARY KEY,
    tenant TEXT NOT NULL,
    request_id TEXT NOT NULL,
    request_digest TEXT NOT NULL,
    method TEXT NOT NULL,
    state INTEGER NOT NULL,
    owner TEXT NOT NULL,
    create_time REAL NOT NULL,
    update_time REAL NOT NULL,
    progress BLOB NOT NULL,
    result BLOB NOT NULL,
    error_code INTEGER NOT NULL,
    error_message TEXT NOT NULL,
    cancel_requested INTEGER NOT NULL DEFAULT 0
);
CREATE UNIQUE INDEX IF NOT EXISTS operations_request
    ON operations (tenant, request_id) WHERE request_id <> '';
CREATE INDEX IF NOT EXISTS operations_tenant ON operations (tenant, operation_id);
"""

# Studies: the study, its input chunks as sent (read again to pool and to report), and its
# queries, one job each. `owner` and `lease_until` say which process drives a running study.
_STUDIES = """
CREATE TABLE studies (
    study_id TEXT PRIMARY KEY,
    tenant TEXT NOT NULL,
    request_id TEXT NOT NULL,
    state INTEGER NOT NULL,
    spec BLOB NOT NULL,
    create_time REAL NOT NULL,
    update_time REAL NOT NULL,
    start_time REAL NOT NULL DEFAULT 0,
    end_time REAL NOT NULL DEFAULT 0,
    inputs BLOB NOT NULL DEFAULT x'',
    progress BLOB NOT NULL DEFAULT x'',
    error_code INTEGER NOT NULL DEFAULT 0,
    error_message TEXT NOT NULL DEFAULT '',
    cancel_requested INTEGER NOT NULL DEFAULT 0,
    report BLOB NOT NULL DEFAULT x'',
    owner TEXT NOT NULL DEFAULT '',
    lease_until REAL NOT NULL DEFAULT 0
);
CREATE UNIQUE INDEX studies_request ON studies (tenant, request_id) WHERE request_id <> '';
CREATE INDEX studies_tenant ON studies (tenant, study_id);
CREATE TABLE study_chunks (
    study_id TEXT NOT NULL,
    seq INTEGER NOT NULL,
    request_id TEXT NOT NULL,
    payload BLOB NOT NULL,
    PRIMARY KEY (study_id, seq)
);
CREATE UNIQUE INDEX study_chunks_request ON study_chunks (study_id, request_id);
CREATE TABLE study_queries (
    study_id TEXT NOT NULL,
    position INTEGER NOT NULL,
    query_id TEXT NOT NULL,
    pool_size INTEGER NOT NULL,
    pool BLOB NOT NULL,
    job_id TEXT NOT NULL DEFAULT '',
    assignment BLOB NOT NULL DEFAULT x'',
    outcome BLOB NOT NULL DEFAULT x'',
    PRIMARY KEY (study_id, position)
);
CREATE UNIQUE INDEX study_queries_id ON study_queries (study_id, query_id);
"""

# A study's trace context (a W3C traceparent): its rounds, on any replica, continue its trace.
# The metrics count the studies that have not ended by tenant and state when scraped; the
# partial index keeps that to those studies, however many have ended.
_STUDY_TRACES = f"""
ALTER TABLE studies ADD COLUMN trace_context TEXT NOT NULL DEFAULT '';
CREATE INDEX studies_unfinished ON studies (tenant, state) WHERE {UNFINISHED_STUDIES};
"""

# Provider batches (OpenAI Batch, Anthropic Message Batches, Gemini batch mode) and the calls
# each carries, journaled before submission (who polls each is held in memory, as leases are).
_PROVIDER_BATCHES = """
CREATE TABLE provider_batches (
    batch_id TEXT PRIMARY KEY,
    tenant TEXT NOT NULL,
    owner TEXT NOT NULL,
    provider TEXT NOT NULL,
    model TEXT NOT NULL,
    calls INTEGER NOT NULL,
    create_time REAL NOT NULL,
    state TEXT NOT NULL,
    vendor_id TEXT NOT NULL DEFAULT '',
    vendor_status TEXT NOT NULL DEFAULT '',
    counts TEXT NOT NULL DEFAULT '{}',
    message TEXT NOT NULL DEFAULT '',
    submit_time REAL NOT NULL DEFAULT 0,
    update_time REAL NOT NULL DEFAULT 0,
    end_time REAL NOT NULL DEFAULT 0
);
CREATE INDEX provider_batches_owner ON provider_batches (tenant, owner, batch_id);
CREATE TABLE provider_batch_calls (
    batch_id TEXT NOT NULL,
    custom_id TEXT NOT NULL,
    job_id TEXT NOT NULL,
    call_id TEXT NOT NULL,
    withdrawn INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (batch_id, custom_id)
);
CREATE INDEX provider_batch_calls_job ON provider_batch_calls (job_id, call_id);
"""

MIGRATIONS: tuple[Migration, ...] = (
    Migration(
        1,
        "jobs, events, journal, verdicts; tenants, keys, usage, reservations; "
        "qualifications; operations; jobs' trace context",
        _INITIAL,
        missing_columns=(("jobs", "trace_context", "TEXT NOT NULL DEFAULT ''"),),
    ),
    Migration(2, "studies: their input chunks and queries", _STUDIES),
    Migration(
        3,
        "study queries judged again after an extension carry their previous outcome",
        "ALTER TABLE study_queries ADD COLUMN carried BLOB NOT NULL DEFAULT x'';",
    ),
    Migration(4, "studies' trace context; studies counted by state", _STUDY_TRACES),
    Migration(5, "provider batches and the calls they carry", _PROVIDER_BATCHES),
)
LATEST_VERSION = MIGRATIONS[-1].version


def schema_version(conn: sqlite3.Connection) -> int:
    (version,) = conn.execute("PRAGMA user_version").fetchone()
    return int(version)


def apply_migrations(conn: sqlite3.Connection, path: Path) -> list[int]:
    """Apply the migrations the database at `path` lacks, in order, in one transaction, on an
    autocommit connection; returns the versions applied. Raises StorageError, writing
    nothing, for a database a newer release wrote."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        current = schema_version(conn)
        if current > LATEST_VERSION:
            raise StorageError(
                f"{path} was written by a newer tierank (schema version {current}; this one "
                f"knows versions up to {LATEST_VERSION}): upgrade tierank to open it"
            )
        pending = [m for m in MIGRATIONS if m.version > current]
        for migration in pending:
            for statement in _statements(migration.sql):
                conn.execute(statement)
            _add_missing_columns(conn, migration.missing_columns)
        if pending:
            # A PRAGMA takes no parameters; the version is an int from MIGRATIONS.
            conn.execute(f"PRAGMA user_version = {pending[-1].version}")
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise
    return [migration.version for migration in pending]


def _statements(script: str) -> Iterator[str]:
    """The statements of `script` one by one: `executescript` would commit the open
    transaction first, and a migration must be one transaction with its version."""
    statement = ""
    for line in script.splitlines(keepends=True):
        statement += line
        if sqlite3.complete_statement(statement):
            yield statement
            statement = ""


def _add_missing_columns(
    conn: sqlite3.Connection, columns: tuple[tuple[str, str, str], ...]
) -> None:
    for table, column, declaration in columns:
        present = {row[1] for row in conn.execute(f"PRAGMA table_info({table})")}
        if column not in present:
            conn.execute(f"ALTER TABLE {table} ADD COLUMN {column} {declaration}")
