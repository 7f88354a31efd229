"""SQLite's numbered migrations (server/storage/sqlite/migrations.py): a database made by an
earlier release, before tenants, keys and spend were stored or before the migrations were
numbered, opens, keeps its rows and gains what it lacked; a fresh one starts at the latest
version; one a newer release wrote is refused and left as it was (the behaviour shared with
PostgreSQL is in tests/storage)."""

from __future__ import annotations

import contextlib
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from tierank.server.errors import QuotaExceeded, StorageError
from tierank.server.storage.base import EventRow, JobRecord, KeyRecord, Limits, Reservation, Spend
from tierank.server.storage.sqlite import SqliteStorage
from tierank.server.storage.sqlite.migrations import (
    LATEST_VERSION,
    apply_migrations,
)
from tierank.v1 import rank_pb2

DAY = "2026-05-09"
PENDING = rank_pb2.JOB_STATE_PENDING


def _job(tenant: str, job_id: str, create_time: float = 1000.0, request_id: str = "") -> JobRecord:
    return JobRecord(
        job_id=job_id,
        tenant=tenant,
        request_id=request_id,
        state=PENDING,
        spec=b"spec",
        query="q",
        candidate_count=3,
        create_time=create_time,
        update_time=create_time,
    )


def _event(sequence: int = 1, kind: str = "accepted") -> EventRow:
    return EventRow(sequence, kind, 1000.0 + sequence, f"event {sequence}".encode())


def _key(key_id: str, tenant: str, create_time: float, subject: str = "") -> KeyRecord:
    return KeyRecord(
        key_id=key_id,
        tenant=tenant,
        role="member",
        display_name=f"key {key_id}",
        secret_hash=bytes(32),
        create_time=create_time,
        certificate_subject=subject,
    )


# -- isolation ------------------------------------------------------------------------------


# -- job quotas -----------------------------------------------------------------------------


# -- spend ----------------------------------------------------------------------------------


def _reservation(rid: str, tokens: int, tenant: str = "acme", day: str = DAY) -> Reservation:
    return Reservation(rid, tenant, day, "judge-a", Spend(calls=1, input_tokens=tokens))


# -- keys -----------------------------------------------------------------------------------


# -- existing databases ---------------------------------------------------------------------

# The schema as it was before tenants, keys and spend were stored.
_OLD_SCHEMA = """
CREATE TABLE jobs (
    job_id TEXT PRIMARY KEY, tenant TEXT NOT NULL, request_id TEXT NOT NULL,
    state INTEGER NOT NULL, spec BLOB NOT NULL, query TEXT NOT NULL,
    candidate_count INTEGER NOT NULL, create_time REAL NOT NULL, update_time REAL NOT NULL,
    last_sequence INTEGER NOT NULL DEFAULT 0, completion_reason INTEGER NOT NULL DEFAULT 0,
    error_code INTEGER NOT NULL DEFAULT 0, error_message TEXT NOT NULL DEFAULT ''
);
CREATE UNIQUE INDEX jobs_request ON jobs (tenant, request_id) WHERE request_id != '';
CREATE INDEX jobs_state ON jobs (state);
CREATE TABLE events (
    job_id TEXT NOT NULL, sequence INTEGER NOT NULL, kind TEXT NOT NULL, time REAL NOT NULL,
    payload BLOB NOT NULL, PRIMARY KEY (job_id, sequence)
) WITHOUT ROWID;
CREATE INDEX events_kind ON events (job_id, kind, sequence);
CREATE TABLE journal (
    job_id TEXT NOT NULL, idx INTEGER NOT NULL, kind TEXT NOT NULL, payload BLOB NOT NULL,
    PRIMARY KEY (job_id, idx)
) WITHOUT ROWID;
CREATE TABLE verdict_cache (key TEXT PRIMARY KEY, payload BLOB NOT NULL) WITHOUT ROWID;
CREATE TABLE verdict_audit (
    job_id TEXT NOT NULL, call_id TEXT NOT NULL, verdict BLOB NOT NULL, prompt TEXT NOT NULL,
    raw_answer TEXT NOT NULL, PRIMARY KEY (job_id, call_id)
) WITHOUT ROWID;
INSERT INTO jobs (job_id, tenant, request_id, state, spec, query, candidate_count, create_time,
    update_time, last_sequence) VALUES ('old', 'acme', '', 1, x'01', 'q', 3, 5.0, 5.0, 1);
INSERT INTO events VALUES ('old', 1, 'accepted', 5.0, x'02');
"""


async def test_a_database_from_before_tenancy_opens_and_gains_the_new_tables(tmp_path: Path):
    db = tmp_path / "old.db"
    with sqlite3.connect(db) as conn:
        conn.executescript(_OLD_SCHEMA)
    conn.close()

    storage = SqliteStorage(db, synchronous="NORMAL")
    try:
        old = await storage.get_job("acme", "old")
        assert old is not None and (old.spec, old.last_sequence) == (b"\x01", 1)
        assert old.trace_context == ""  # made before traces: the column added at open
        assert [e.payload for e in await storage.read_events("acme", "old", 0, 10, 1 << 20)] == [
            b"\x02"
        ]
        # The old unfinished job counts against the new limits.
        with pytest.raises(QuotaExceeded):
            await storage.create_job(_job("acme", "new"), _event(), Limits(max_concurrent_jobs=1))
        await storage.create_key(_key("k1", "acme", 10.0))
        await storage.reserve_spend(_reservation("r1", 10))
    finally:
        await storage.close()

    reopened = SqliteStorage(db, synchronous="NORMAL")
    try:
        assert (await reopened.get_job("acme", "old")).job_id == "old"
        assert (await reopened.get_key("k1")).tenant == "acme"
        assert (await reopened.usage("acme", DAY)).reserved == Spend(calls=1, input_tokens=10)
        assert (await reopened.usage("acme", DAY)).unfinished_jobs == 1
    finally:
        await reopened.close()


# The schema of commit 643beef, the last one before SQLite's migrations were numbered: every
# table of today without the jobs' trace_context column, and user_version 0.
_SCHEMA_643BEEF = """
CREATE TABLE jobs (
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
    error_message TEXT NOT NULL DEFAULT ''
);
CREATE UNIQUE INDEX jobs_request ON jobs (tenant, request_id)
    WHERE request_id != '';
CREATE INDEX jobs_state ON jobs (state);
CREATE TABLE events (
    job_id TEXT NOT NULL,
    sequence INTEGER NOT NULL,
    kind TEXT NOT NULL,
    time REAL NOT NULL,
    payload BLOB NOT NULL,
    PRIMARY KEY (job_id, sequence)
) WITHOUT ROWID;
CREATE INDEX events_kind ON events (job_id, kind, sequence);
CREATE TABLE journal (
    job_id TEXT NOT NULL,
    idx INTEGER NOT NULL,
    kind TEXT NOT NULL,
    payload BLOB NOT NULL,
    PRIMARY KEY (job_id, idx)
) WITHOUT ROWID;
CREATE TABLE verdict_cache (
    key TEXT PRIMARY KEY,
    payload BLOB NOT NULL
) WITHOUT ROWID;
CREATE TABLE verdict_audit (
    job_id TEXT NOT NULL,
    call_id TEXT NOT NULL,
    verdict BLOB NOT NULL,
    prompt TEXT NOT NULL,
    raw_answer TEXT NOT NULL,
    PRIMARY KEY (job_id, call_id)
) WITHOUT ROWID;
CREATE INDEX jobs_created ON jobs (tenant, create_time);
CREATE INDEX jobs_unfinished ON jobs (tenant) WHERE state NOT IN (3, 4, 5);
CREATE TABLE tenants (
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
CREATE TABLE api_keys (
    key_id TEXT PRIMARY KEY,
    tenant TEXT NOT NULL,
    role TEXT NOT NULL,
    display_name TEXT NOT NULL,
    secret_hash BLOB NOT NULL,
    create_time REAL NOT NULL,
    revoke_time REAL,
    certificate_subject TEXT NOT NULL DEFAULT ''
);
CREATE INDEX api_keys_tenant ON api_keys (tenant, create_time);
CREATE INDEX api_keys_subject ON api_keys (certificate_subject, create_time)
    WHERE certificate_subject != '';
CREATE TABLE provider_keys (
    tenant TEXT NOT NULL,
    provider TEXT NOT NULL,
    sealed BLOB NOT NULL,
    PRIMARY KEY (tenant, provider)
) WITHOUT ROWID;
CREATE TABLE usage (
    tenant TEXT NOT NULL,
    day TEXT NOT NULL,
    judge TEXT NOT NULL,
    calls INTEGER NOT NULL,
    input_tokens INTEGER NOT NULL,
    output_tokens INTEGER NOT NULL,
    cost_usd REAL NOT NULL,
    PRIMARY KEY (tenant, day, judge)
) WITHOUT ROWID;
CREATE TABLE reservations (
    reservation_id TEXT PRIMARY KEY,
    tenant TEXT NOT NULL,
    day TEXT NOT NULL,
    judge TEXT NOT NULL,
    calls INTEGER NOT NULL,
    input_tokens INTEGER NOT NULL,
    output_tokens INTEGER NOT NULL,
    cost_usd REAL NOT NULL
);
CREATE INDEX reservations_day ON reservations (tenant, day);
CREATE TABLE qualifications (
    qualification_id TEXT PRIMARY KEY,
    tenant TEXT NOT NULL,
    judge_identity TEXT NOT NULL,
    create_time REAL NOT NULL,
    usable INTEGER NOT NULL,
    weight REAL NOT NULL,
    payload BLOB NOT NULL
);
CREATE INDEX qualifications_judge
    ON qualifications (tenant, judge_identity, create_time);
CREATE INDEX qualifications_tenant ON qualifications (tenant, create_time);
CREATE TABLE operations (
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
CREATE UNIQUE INDEX operations_request
    ON operations (tenant, request_id) WHERE request_id <> '';
CREATE INDEX operations_tenant ON operations (tenant, operation_id);
"""


def _layout(path: Path) -> dict[str, object]:
    """What a database is made of: its schema version, every table's columns (name, type, not
    null, default, primary key) and every index's definition."""
    with contextlib.closing(sqlite3.connect(path)) as conn:
        tables = {
            name: conn.execute(f"PRAGMA table_info({name})").fetchall()
            for (name,) in conn.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name"
            )
        }
        indexes = {
            name: " ".join(sql.split())
            for name, sql in conn.execute(
                "SELECT name, sql FROM sqlite_master WHERE type = 'index' AND sql IS NOT NULL"
            )
        }
        (version,) = conn.execute("PRAGMA user_version").fetchone()
    return {"version": version, "tables": tables, "indexes": indexes}


async def _made_fresh(path: Path) -> None:
    storage = SqliteStorage(path, synchronous="NORMAL")
    await storage.close()


async def test_a_database_from_before_numbered_migrations_opens_at_the_latest_layout(
    tmp_path: Path,
):
    db = tmp_path / "643beef.db"
    with contextlib.closing(sqlite3.connect(db)) as conn:
        conn.executescript(_SCHEMA_643BEEF)
        conn.execute(
            "INSERT INTO jobs (job_id, tenant, request_id, state, spec, query, candidate_count, "
            "create_time, update_time, last_sequence) "
            "VALUES ('old', 'acme', 'r1', 1, x'01', 'q', 3, 5.0, 5.0, 1)"
        )
        conn.execute("INSERT INTO events VALUES ('old', 1, 'accepted', 5.0, x'02')")
        conn.commit()

    storage = SqliteStorage(db, synchronous="NORMAL")
    try:
        old = await storage.get_job("acme", "old")
        assert old is not None and (old.request_id, old.trace_context) == ("r1", "")
        traced = JobRecord(**{**_job("acme", "new").__dict__, "trace_context": "00-ab-cd-01"})
        await storage.create_job(traced, _event())
        assert (await storage.get_job("acme", "new")).trace_context == "00-ab-cd-01"
    finally:
        await storage.close()

    fresh = tmp_path / "fresh.db"
    await _made_fresh(fresh)
    upgraded = _layout(db)
    assert upgraded["version"] == LATEST_VERSION
    assert upgraded == _layout(fresh)


async def test_a_fresh_database_starts_at_the_latest_version_and_reopens_unchanged(
    tmp_path: Path,
):
    db = tmp_path / "fresh.db"
    await _made_fresh(db)
    made = _layout(db)
    assert made["version"] == LATEST_VERSION
    assert {"jobs", "tenants", "operations", "qualifications"} <= set(made["tables"])

    with contextlib.closing(sqlite3.connect(db, isolation_level=None)) as conn:
        assert apply_migrations(conn, db) == []
    await _made_fresh(db)
    assert _layout(db) == made


async def test_a_database_from_a_newer_release_is_refused_in_one_line_and_left_as_it_was(
    tmp_path: Path,
):
    db = tmp_path / "newer.db"
    storage = SqliteStorage(db, synchronous="NORMAL")
    await storage.create_job(_job("acme", "kept"), _event())
    await storage.close()
    newer = LATEST_VERSION + 1
    with contextlib.closing(sqlite3.connect(db)) as conn:
        conn.execute(f"PRAGMA user_version = {newer}")
    before = db.read_bytes()

    with pytest.raises(StorageError) as refused:
        SqliteStorage(db, synchronous="NORMAL")
    expected = (
        f"{db} was written by a newer tierank (schema version {newer}; this one knows "
        f"versions up to {LATEST_VERSION}): upgrade tierank to open it"
    )
    assert str(refused.value) == expected

    result = subprocess.run(
        [sys.executable, "-m", "tierank.server", "--listen", "127.0.0.1:0", "--db", str(db)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 1
    assert [line for line in result.stderr.splitlines() if line.strip()] == [f"tierank: {expected}"]
    assert db.read_bytes() == before
    assert sorted(path.name for path in tmp_path.iterdir()) == ["newer.db"]
