"""The PostgreSQL schema, as numbered migrations, and how they are applied.

A migration is never edited once released: a schema change is a new migration at the end.
Each one runs in its own transaction under one advisory lock, and the table
`schema_migrations` records it in that same transaction, so replicas that start together apply
each migration exactly once and a failed migration leaves nothing half done.

Column types follow the SQLite schema with PostgreSQL's own: BYTEA for opaque payloads,
DOUBLE PRECISION for times (seconds since the epoch, as the storage interface has them),
BIGINT for counters. Every TEXT column collates as "C", i.e. by bytes, as SQLite does: listings
and page tokens then order the same on both, whatever the database's locale.

PostgreSQL's TEXT cannot hold a NUL character. Free text that comes from outside (a client's
query, a candidate's words in a prompt, a judge's answer, a provider's error) is stored as UTF-8
in BYTEA, so that no such text can make a write fail that SQLite accepts.
"""

from __future__ import annotations

from dataclasses import dataclass

import psycopg
from psycopg import sql

from tierank.resources import STUDY_RUNNING
from tierank.server.storage.rules import UNFINISHED_JOBS, UNFINISHED_STUDIES


@dataclass(frozen=True)
class Migration:
    version: int
    description: str
    sql: str


# Any constant works as long as nothing else in the database uses it; this one spells "tierank".
MIGRATION_LOCK = 0x7469657261_6E6B

_TEXT = 'TEXT COLLATE "C"'

_INITIAL = f"""
CREATE TABLE jobs (
    job_id {_TEXT} PRIMARY KEY,
    tenant {_TEXT} NOT NULL,
    request_id {_TEXT} NOT NULL,
    state INTEGER NOT NULL,
    spec BYTEA NOT NULL,
    query BYTEA NOT NULL,
    candidate_count INTEGER NOT NULL,
    create_time DOUBLE PRECISION NOT NULL,
    update_time DOUBLE PRECISION NOT NULL,
    last_sequence BIGINT NOT NULL DEFAULT 0,
    completion_reason INTEGER NOT NULL DEFAULT 0,
    error_code INTEGER NOT NULL DEFAULT 0,
    error_message BYTEA NOT NULL DEFAULT ''
);
-- Idempotent creation rests on this constraint, not on a check before the insert.
CREATE UNIQUE INDEX jobs_request ON jobs (tenant, request_id) WHERE request_id <> '';
CREATE INDEX jobs_state ON jobs (state);
CREATE INDEX jobs_created ON jobs (tenant, create_time);
CREATE INDEX jobs_unfinished ON jobs (tenant) WHERE {UNFINISHED_JOBS};
CREATE TABLE events (
    job_id {_TEXT} NOT NULL,
    sequence BIGINT NOT NULL,
    kind {_TEXT} NOT NULL,
    time DOUBLE PRECISION NOT NULL,
    payload BYTEA NOT NULL,
    PRIMARY KEY (job_id, sequence)
);
CREATE INDEX events_kind ON events (job_id, kind, sequence);
CREATE TABLE journal (
    job_id {_TEXT} NOT NULL,
    idx BIGINT NOT NULL,
    kind {_TEXT} NOT NULL,
    payload BYTEA NOT NULL,
    PRIMARY KEY (job_id, idx)
);
CREATE TABLE verdict_cache (
    key {_TEXT} PRIMARY KEY,
    payload BYTEA NOT NULL
);
CREATE TABLE verdict_audit (
    job_id {_TEXT} NOT NULL,
    call_id {_TEXT} NOT NULL,
    verdict BYTEA NOT NULL,
    prompt BYTEA NOT NULL,
    raw_answer BYTEA NOT NULL,
    PRIMARY KEY (job_id, call_id)
);
CREATE TABLE tenants (
    tenant {_TEXT} PRIMARY KEY,
    max_concurrent_jobs BIGINT,
    max_candidates BIGINT,
    max_watchers BIGINT,
    jobs_per_minute BIGINT,
    daily_judge_calls BIGINT,
    daily_input_tokens BIGINT,
    daily_cost_usd DOUBLE PRECISION,
    allow_server_provider_keys BOOLEAN NOT NULL DEFAULT TRUE,
    create_time DOUBLE PRECISION NOT NULL,
    update_time DOUBLE PRECISION NOT NULL
);
CREATE TABLE api_keys (
    key_id {_TEXT} PRIMARY KEY,
    tenant {_TEXT} NOT NULL,
    role {_TEXT} NOT NULL,
    display_name {_TEXT} NOT NULL,
    secret_hash BYTEA NOT NULL,
    create_time DOUBLE PRECISION NOT NULL,
    revoke_time DOUBLE PRECISION,
    certificate_subject {_TEXT} NOT NULL DEFAULT ''
);
CREATE INDEX api_keys_tenant ON api_keys (tenant, create_time);
CREATE INDEX api_keys_subject ON api_keys (certificate_subject, create_time)
    WHERE certificate_subject <> '';
CREATE TABLE provider_keys (
    tenant {_TEXT} NOT NULL,
    provider {_TEXT} NOT NULL,
    sealed BYTEA NOT NULL,
    PRIMARY KEY (tenant, provider)
);
CREATE TABLE usage (
    tenant {_TEXT} NOT NULL,
    day {_TEXT} NOT NULL,
    judge {_TEXT} NOT NULL,
    calls BIGINT NOT NULL,
    input_tokens BIGINT NOT NULL,
    output_tokens BIGINT NOT NULL,
    cost_usd DOUBLE PRECISION NOT NULL,
    PRIMARY KEY (tenant, day, judge)
);
CREATE TABLE reservations (
    reservation_id {_TEXT} PRIMARY KEY,
    tenant {_TEXT} NOT NULL,
    day {_TEXT} NOT NULL,
    judge {_TEXT} NOT NULL,
    calls BIGINT NOT NULL,
    input_tokens BIGINT NOT NULL,
    output_tokens BIGINT NOT NULL,
    cost_usd DOUBLE PRECISION NOT NULL
);
CREATE INDEX reservations_day ON reservations (tenant, day);
"""

# Several replicas on one database: a job is run by the replica holding its lease (owner,
# epoch, expiry on the database's clock), replicas announce themselves in `replicas`, and a
# reservation names the replica whose call it holds, so that only a dead replica's are settled.
_REPLICAS = f"""
ALTER TABLE jobs
    ADD COLUMN lease_owner {_TEXT},
    ADD COLUMN lease_epoch BIGINT NOT NULL DEFAULT 0,
    ADD COLUMN lease_until DOUBLE PRECISION NOT NULL DEFAULT 0,
    ADD COLUMN cancel_requested BOOLEAN NOT NULL DEFAULT FALSE;
CREATE INDEX jobs_claimable ON jobs (job_id) WHERE {UNFINISHED_JOBS};
CREATE TABLE replicas (
    replica_id {_TEXT} PRIMARY KEY,
    alive_until DOUBLE PRECISION NOT NULL,
    draining BOOLEAN NOT NULL DEFAULT FALSE
);
ALTER TABLE reservations ADD COLUMN owner {_TEXT} NOT NULL DEFAULT '';
CREATE TABLE watchers (
    watch_id {_TEXT} PRIMARY KEY,
    replica_id {_TEXT} NOT NULL,
    tenant {_TEXT} NOT NULL
);
CREATE INDEX watchers_tenant ON watchers (tenant);
"""

_QUALIFICATIONS = f"""
CREATE TABLE qualifications (
    qualification_id {_TEXT} PRIMARY KEY,
    tenant {_TEXT} NOT NULL,
    judge_identity {_TEXT} NOT NULL,
    create_time DOUBLE PRECISION NOT NULL,
    usable BOOLEAN NOT NULL,
    weight DOUBLE PRECISION NOT NULL,
    payload BYTEA NOT NULL
);
CREATE INDEX qualifications_judge ON qualifications (tenant, judge_identity, create_time);
CREATE INDEX qualifications_tenant ON qualifications (tenant, create_time);
"""

# Long-running requests (QualifyJudge, FillQrels): state and progress live here, so that every
# replica serves GetOperation and WatchOperation; `owner` is the replica that runs one.
_OPERATIONS = f"""
CREATE TABLE operations (
    operation_id {_TEXT} PRIMARY KEY,
    tenant {_TEXT} NOT NULL,
    request_id {_TEXT} NOT NULL,
    request_digest {_TEXT} NOT NULL,
    method {_TEXT} NOT NULL,
    state INTEGER NOT NULL,
    owner {_TEXT} NOT NULL,
    create_time DOUBLE PRECISION NOT NULL,
    update_time DOUBLE PRECISION NOT NULL,
    progress BYTEA NOT NULL,
    result BYTEA NOT NULL,
    error_code INTEGER NOT NULL,
    error_message BYTEA NOT NULL,
    cancel_requested BOOLEAN NOT NULL DEFAULT FALSE
);
CREATE UNIQUE INDEX operations_request ON operations (tenant, request_id) WHERE request_id <> '';
CREATE INDEX operations_tenant ON operations (tenant, operation_id);
CREATE INDEX operations_unfinished ON operations (owner) WHERE {UNFINISHED_JOBS};
"""

# A job's trace context (a W3C traceparent, ASCII): its runs on any replica continue its trace.
_JOB_TRACES = f"""
ALTER TABLE jobs ADD COLUMN trace_context {_TEXT} NOT NULL DEFAULT '';
"""

# Studies: the study, its input chunks as sent (read again to pool and to report), and its
# queries, one job each. `owner` and `lease_until` (the database's clock) say which replica
# drives a running study.
_STUDIES = f"""
CREATE TABLE studies (
    study_id {_TEXT} PRIMARY KEY,
    tenant {_TEXT} NOT NULL,
    request_id {_TEXT} NOT NULL,
    state INTEGER NOT NULL,
    spec BYTEA NOT NULL,
    create_time DOUBLE PRECISION NOT NULL,
    update_time DOUBLE PRECISION NOT NULL,
    start_time DOUBLE PRECISION NOT NULL DEFAULT 0,
    end_time DOUBLE PRECISION NOT NULL DEFAULT 0,
    inputs BYTEA NOT NULL DEFAULT '',
    progress BYTEA NOT NULL DEFAULT '',
    error_code INTEGER NOT NULL DEFAULT 0,
    error_message BYTEA NOT NULL DEFAULT '',
    cancel_requested BOOLEAN NOT NULL DEFAULT FALSE,
    report BYTEA NOT NULL DEFAULT '',
    owner {_TEXT} NOT NULL DEFAULT '',
    lease_until DOUBLE PRECISION NOT NULL DEFAULT 0
);
CREATE UNIQUE INDEX studies_request ON studies (tenant, request_id) WHERE request_id <> '';
CREATE INDEX studies_tenant ON studies (tenant, study_id);
CREATE INDEX studies_running ON studies (study_id) WHERE state = {STUDY_RUNNING};
CREATE TABLE study_chunks (
    study_id {_TEXT} NOT NULL,
    seq INTEGER NOT NULL,
    request_id {_TEXT} NOT NULL,
    payload BYTEA NOT NULL,
    PRIMARY KEY (study_id, seq)
);
CREATE UNIQUE INDEX study_chunks_request ON study_chunks (study_id, request_id);
CREATE TABLE study_queries (
    study_id {_TEXT} NOT NULL,
    position INTEGER NOT NULL,
    query_id {_TEXT} NOT NULL,
    pool_size INTEGER NOT NULL,
    pool BYTEA NOT NULL,
    job_id {_TEXT} NOT NULL DEFAULT '',
    assignment BYTEA NOT NULL DEFAULT '',
    outcome BYTEA NOT NULL DEFAULT '',
    PRIMARY KEY (study_id, position)
);
CREATE UNIQUE INDEX study_queries_id ON study_queries (study_id, query_id);
"""

# A study's trace context (a W3C traceparent, ASCII): its rounds, on any replica, continue its
# trace. The metrics count the studies that have not ended by tenant and state when scraped;
# the partial index keeps that to those studies, however many have ended.
_STUDY_TRACES = f"""
ALTER TABLE studies ADD COLUMN trace_context {_TEXT} NOT NULL DEFAULT '';
CREATE INDEX studies_unfinished ON studies (tenant, state) WHERE {UNFINISHED_STUDIES};
"""

# Provider batches (OpenAI Batch, Anthropic Message Batches, Gemini batch mode) and the calls
# each carries, journaled before submission; `poller` and `poll_until` (the database's clock)
# say which replica asks the vendor. The vendor's message is free text from outside (BYTEA).
_PROVIDER_BATCHES = f"""
CREATE TABLE provider_batches (
    batch_id {_TEXT} PRIMARY KEY,
    tenant {_TEXT} NOT NULL,
    owner {_TEXT} NOT NULL,
    provider {_TEXT} NOT NULL,
    model {_TEXT} NOT NULL,
    calls INTEGER NOT NULL,
    create_time DOUBLE PRECISION NOT NULL,
    state {_TEXT} NOT NULL,
    vendor_id {_TEXT} NOT NULL DEFAULT '',
    vendor_status {_TEXT} NOT NULL DEFAULT '',
    counts {_TEXT} NOT NULL DEFAULT '{{}}',
    message BYTEA NOT NULL DEFAULT '',
    submit_time DOUBLE PRECISION NOT NULL DEFAULT 0,
    update_time DOUBLE PRECISION NOT NULL DEFAULT 0,
    end_time DOUBLE PRECISION NOT NULL DEFAULT 0,
    poller {_TEXT} NOT NULL DEFAULT '',
    poll_until DOUBLE PRECISION NOT NULL DEFAULT 0
);
CREATE INDEX provider_batches_owner ON provider_batches (tenant, owner, batch_id);
CREATE TABLE provider_batch_calls (
    batch_id {_TEXT} NOT NULL,
    custom_id {_TEXT} NOT NULL,
    job_id {_TEXT} NOT NULL,
    call_id {_TEXT} NOT NULL,
    withdrawn BOOLEAN NOT NULL DEFAULT FALSE,
    PRIMARY KEY (batch_id, custom_id)
);
CREATE INDEX provider_batch_calls_job ON provider_batch_calls (job_id, call_id);
"""

MIGRATIONS: tuple[Migration, ...] = (
    Migration(1, "jobs, events, journal, verdicts; tenants, keys, usage, reservations", _INITIAL),
    Migration(2, "job leases, replicas, reservation owners, watchers", _REPLICAS),
    Migration(3, "judge qualifications", _QUALIFICATIONS),
    Migration(4, "operations: long-running QualifyJudge and FillQrels", _OPERATIONS),
    Migration(5, "jobs' trace context", _JOB_TRACES),
    Migration(6, "studies: their input chunks and queries", _STUDIES),
    Migration(
        7,
        "study queries judged again after an extension carry their previous outcome",
        "ALTER TABLE study_queries ADD COLUMN carried BYTEA NOT NULL DEFAULT '';",
    ),
    Migration(8, "studies' trace context; studies counted by state", _STUDY_TRACES),
    Migration(9, "provider batches and the calls they carry", _PROVIDER_BATCHES),
)

_LEDGER = """
CREATE TABLE IF NOT EXISTS schema_migrations (
    version INTEGER PRIMARY KEY,
    description TEXT NOT NULL,
    applied_at TIMESTAMPTZ NOT NULL DEFAULT now()
)
"""


async def _lock(conn: psycopg.AsyncConnection) -> None:
    # A migration may rewrite a large table, and a replica waits here while another migrates:
    # neither is a runaway statement, so the session's statement timeout does not apply.
    await conn.execute("SET LOCAL statement_timeout = 0")
    await conn.execute("SELECT pg_advisory_xact_lock(%s)", (MIGRATION_LOCK,))


async def apply_migrations(conn: psycopg.AsyncConnection, schema: str | None) -> list[int]:
    """Apply the migrations this database lacks, in order, on an autocommit connection whose
    search_path names `schema` (created here if missing); returns the versions applied."""
    async with conn.transaction():
        await _lock(conn)
        if schema is not None:
            await conn.execute(
                sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(schema))
            )
        await conn.execute(_LEDGER)
    applied: list[int] = []
    for migration in MIGRATIONS:
        async with conn.transaction():
            await _lock(conn)
            # Another process may have applied it while this one waited for the lock.
            cursor = await conn.execute(
                "SELECT 1 FROM schema_migrations WHERE version = %s", (migration.version,)
            )
            if await cursor.fetchone() is not None:
                continue
            await conn.execute(migration.sql)
            await conn.execute(
                "INSERT INTO schema_migrations (version, description) VALUES (%s, %s)",
                (migration.version, migration.description),
            )
        applied.append(migration.version)
    return applied


async def migration_states(conn: psycopg.AsyncConnection) -> list[tuple[int, str, bool]]:
    """(version, description, applied) of every known migration, and of any applied one this
    code does not know (a newer release ran); writes nothing."""
    cursor = await conn.execute("SELECT to_regclass('schema_migrations') IS NOT NULL")
    row = await cursor.fetchone()
    recorded: dict[int, str] = {}
    if row is not None and row[0]:
        cursor = await conn.execute("SELECT version, description FROM schema_migrations")
        recorded = {version: description for version, description in await cursor.fetchall()}
    states = {m.version: (m.version, m.description, m.version in recorded) for m in MIGRATIONS}
    for version, description in recorded.items():
        states.setdefault(version, (version, description, True))
    return [states[version] for version in sorted(states)]
