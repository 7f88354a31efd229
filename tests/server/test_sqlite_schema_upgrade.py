"""A SQLite database made before tenants, keys and spend were stored opens, keeps its jobs and
gains the new tables (the behaviour shared with PostgreSQL is in tests/storage)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from tierank.server.errors import QuotaExceeded
from tierank.server.storage.base import EventRow, JobRecord, KeyRecord, Limits, Reservation, Spend
from tierank.server.storage.sqlite import SqliteStorage
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
