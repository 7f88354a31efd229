"""SQLite storage for tenants: isolation of reads, job quotas, spend reservations, API keys,
tenant settings, and databases made before these tables existed."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tierank.server.storage.base import (
    DuplicateRequest,
    EventRow,
    JobRecord,
    JobUpdate,
    KeyRecord,
    Limits,
    QuotaExceeded,
    Reservation,
    Spend,
    StorageError,
    VerdictAudit,
)
from tierank.server.storage.sqlite import SqliteStorage
from tierank.v1 import rank_pb2

DAY = "2026-05-09"
OTHER_DAY = "2026-05-08"
PENDING = rank_pb2.JOB_STATE_PENDING
SUCCEEDED = rank_pb2.JOB_STATE_SUCCEEDED


@pytest.fixture
async def storage(tmp_path: Path) -> AsyncIterator[SqliteStorage]:
    opened = SqliteStorage(tmp_path / "tenancy.db", synchronous="NORMAL")
    yield opened
    await opened.close()


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


async def _stored_job_ids(storage: SqliteStorage, tenant: str) -> list[str]:
    return sorted(j.job_id for j in await storage.list_jobs(tenant, None, 1000, None))


# -- isolation ------------------------------------------------------------------------------


async def test_another_tenants_job_reads_exactly_like_a_missing_one(storage: SqliteStorage):
    await storage.create_job(_job("acme", "j1"), _event(1))
    audit = VerdictAudit("call-1", b"verdict", "prompt", "answer")
    await storage.commit("j1", JobUpdate(events=[_event(2, "verdict")], audit=[audit]))

    assert (await storage.get_job("acme", "j1")).job_id == "j1"
    assert [e.sequence for e in await storage.read_events("acme", "j1", 0, 10, 1 << 20)] == [1, 2]
    assert (await storage.latest_event("acme", "j1", ["verdict"])).sequence == 2
    assert await storage.read_audit("acme", "j1", "call-1") == audit

    for tenant, job_id in (("globex", "j1"), ("acme", "missing"), ("globex", "missing")):
        assert await storage.get_job(tenant, job_id) is None
        assert await storage.read_events(tenant, job_id, 0, 10, 1 << 20) == []
        assert await storage.latest_event(tenant, job_id, ["accepted", "verdict"]) is None
        assert await storage.read_audit(tenant, job_id, "call-1") is None


# -- job quotas -----------------------------------------------------------------------------


async def test_concurrent_creates_never_pass_max_concurrent_jobs(storage: SqliteStorage):
    limits = Limits(max_concurrent_jobs=3)
    outcomes = await asyncio.gather(
        *(storage.create_job(_job("acme", f"j{i:02}"), _event(), limits) for i in range(10)),
        return_exceptions=True,
    )
    created = [o for o in outcomes if isinstance(o, JobRecord)]
    refused = [o for o in outcomes if isinstance(o, QuotaExceeded)]
    assert len(created) == 3 and len(refused) == 7, outcomes
    assert all(
        (e.limit, e.value, e.retry_after_s) == ("max_concurrent_jobs", 3, None) for e in refused
    )
    assert await _stored_job_ids(storage, "acme") == sorted(j.job_id for j in created)
    # A refused job left nothing behind, not even its first event.
    refused_id = next(
        f"j{i:02}" for i in range(10) if f"j{i:02}" not in {j.job_id for j in created}
    )
    assert await storage.read_events("acme", refused_id, 0, 10, 1 << 20) == []
    assert (await storage.usage("acme", DAY)).unfinished_jobs == 3

    await storage.create_job(_job("globex", "g1"), _event(), limits)

    with pytest.raises(QuotaExceeded):
        await storage.create_job(_job("acme", "late"), _event(), limits)
    await storage.commit(created[0].job_id, JobUpdate(state=SUCCEEDED))
    await storage.create_job(_job("acme", "late"), _event(), limits)
    with pytest.raises(QuotaExceeded):
        await storage.create_job(_job("acme", "later"), _event(), limits)
    assert (await storage.usage("acme", DAY)).unfinished_jobs == 3


async def test_a_reused_request_id_is_a_duplicate_even_at_the_limit(storage: SqliteStorage):
    limits = Limits(max_concurrent_jobs=1)
    first = await storage.create_job(_job("acme", "j1", request_id="same"), _event(), limits)
    with pytest.raises(DuplicateRequest) as duplicate:
        await storage.create_job(_job("acme", "j2", request_id="same"), _event(), limits)
    assert duplicate.value.existing == first


async def test_jobs_per_minute_says_when_the_oldest_leaves_the_window(storage: SqliteStorage):
    limits = Limits(jobs_per_minute=2)
    await storage.create_job(_job("acme", "j1", create_time=1000.0), _event(), limits)
    await storage.create_job(_job("acme", "j2", create_time=1010.0), _event(), limits)
    # Finished jobs still count: the limit is on how fast jobs are made.
    await storage.commit("j1", JobUpdate(state=SUCCEEDED))

    with pytest.raises(QuotaExceeded) as refused:
        await storage.create_job(_job("acme", "j3", create_time=1030.0), _event(), limits)
    assert (refused.value.limit, refused.value.value) == ("jobs_per_minute", 2)
    assert refused.value.retry_after_s == pytest.approx(30.0)

    await storage.create_job(_job("globex", "g1", create_time=1030.0), _event(), limits)
    with pytest.raises(QuotaExceeded) as refused:
        await storage.create_job(_job("acme", "j3", create_time=1059.9), _event(), limits)
    assert 0 < refused.value.retry_after_s < 1
    await storage.create_job(_job("acme", "j3", create_time=1060.0), _event(), limits)
    assert await _stored_job_ids(storage, "acme") == ["j1", "j2", "j3"]


# -- spend ----------------------------------------------------------------------------------


def _reservation(rid: str, tokens: int, tenant: str = "acme", day: str = DAY) -> Reservation:
    return Reservation(rid, tenant, day, "judge-a", Spend(calls=1, input_tokens=tokens))


async def test_concurrent_reservations_never_pass_a_daily_limit(storage: SqliteStorage):
    await storage.put_tenant("acme", Limits(daily_input_tokens=1000), [], None, now=1.0)
    outcomes = await asyncio.gather(
        *(storage.reserve_spend(_reservation(f"r{i:02}", 100)) for i in range(50)),
        return_exceptions=True,
    )
    held = [f"r{i:02}" for i, o in enumerate(outcomes) if o is None]
    refused = [o for o in outcomes if isinstance(o, QuotaExceeded)]
    assert len(held) == 10 and len(refused) == 40, outcomes
    assert all((e.limit, e.value) == ("daily_input_tokens", 1000) for e in refused)
    report = await storage.usage("acme", DAY)
    assert report.reserved == Spend(calls=10, input_tokens=1000)
    assert report.today == {}

    # Settling two calls that used 40 tokens each frees 120: room for one more, not two.
    for rid in held[:2]:
        await storage.settle_spend(
            rid, Spend(calls=1, input_tokens=40, output_tokens=7, cost_usd=0.5)
        )
    await storage.settle_spend("unknown", Spend(calls=99))
    await storage.reserve_spend(_reservation("extra", 100))
    with pytest.raises(QuotaExceeded):
        await storage.reserve_spend(_reservation("one-too-many", 100))

    report = await storage.usage("acme", DAY)
    assert report.today == {"judge-a": Spend(2, 80, 14, 1.0)}
    assert report.reserved == Spend(calls=9, input_tokens=900)

    assert await storage.release_reservations() == 9
    assert await storage.release_reservations() == 0
    report = await storage.usage("acme", DAY)
    assert report.today == {"judge-a": Spend(11, 980, 14, 1.0)}
    assert report.reserved == Spend()
    with pytest.raises(QuotaExceeded):
        await storage.reserve_spend(_reservation("after-release", 21))
    await storage.reserve_spend(_reservation("last", 20))


async def test_other_days_and_tenants_do_not_count(storage: SqliteStorage):
    await storage.put_tenant("acme", Limits(daily_input_tokens=1000), [], None, now=1.0)
    await storage.reserve_spend(_reservation("yesterday", 900, day=OTHER_DAY))
    await storage.settle_spend("yesterday", Spend(calls=1, input_tokens=900))
    await storage.reserve_spend(_reservation("old-open", 100, day=OTHER_DAY))
    # A tenant with no row has no limits at all.
    await storage.reserve_spend(_reservation("globex", 50_000, tenant="globex"))

    await storage.reserve_spend(_reservation("today", 1000))
    report = await storage.usage("acme", DAY)
    assert report.reserved == Spend(calls=1, input_tokens=1000)
    assert report.today == {}
    assert report.total == {"judge-a": Spend(calls=1, input_tokens=900)}

    await storage.settle_spend("today", Spend(calls=1, input_tokens=600))
    await storage.reserve_spend(
        Reservation("judge-b", "acme", DAY, "judge-b", Spend(calls=1, input_tokens=100))
    )
    await storage.settle_spend("judge-b", Spend(calls=1, input_tokens=100, cost_usd=0.25))
    report = await storage.usage("acme", DAY)
    assert report.today == {
        "judge-a": Spend(calls=1, input_tokens=600),
        "judge-b": Spend(calls=1, input_tokens=100, cost_usd=0.25),
    }
    assert report.total == {
        "judge-a": Spend(calls=2, input_tokens=1500),
        "judge-b": Spend(calls=1, input_tokens=100, cost_usd=0.25),
    }
    assert (await storage.usage("globex", DAY)).reserved == Spend(calls=1, input_tokens=50_000)


async def test_call_and_cost_limits(storage: SqliteStorage):
    await storage.put_tenant(
        "acme", Limits(daily_judge_calls=12, daily_cost_usd=1.0), [], None, now=1.0
    )
    # Ten times $0.10 is not exactly $1.00 in floating point; it must still fit.
    for i in range(10):
        await storage.reserve_spend(
            Reservation(f"r{i}", "acme", DAY, "j", Spend(calls=1, cost_usd=0.1))
        )
    with pytest.raises(QuotaExceeded) as refused:
        await storage.reserve_spend(
            Reservation("r10", "acme", DAY, "j", Spend(calls=1, cost_usd=0.01))
        )
    assert (refused.value.limit, refused.value.value) == ("daily_cost_usd", 1.0)
    await storage.reserve_spend(Reservation("free", "acme", DAY, "j", Spend(calls=2)))
    with pytest.raises(QuotaExceeded) as refused:
        await storage.reserve_spend(Reservation("r11", "acme", DAY, "j", Spend(calls=1)))
    assert (refused.value.limit, refused.value.value) == ("daily_judge_calls", 12)


# -- keys -----------------------------------------------------------------------------------


async def test_keys_create_list_and_revoke(storage: SqliteStorage):
    await storage.create_key(_key("k2", "acme", 200.0))
    await storage.create_key(_key("k1", "acme", 100.0, subject="CN=ci"))
    await storage.create_key(_key("k3", "globex", 150.0))

    # The tenant was made by its first key.
    tenant = await storage.get_tenant("acme")
    assert tenant is not None and tenant.create_time == 200.0
    assert tenant.limits == Limits() and tenant.allow_server_provider_keys
    assert await storage.get_key("k1") == _key("k1", "acme", 100.0, subject="CN=ci")
    assert await storage.get_key("nope") is None
    assert [k.key_id for k in await storage.list_keys(None, False)] == ["k1", "k3", "k2"]
    assert [k.key_id for k in await storage.list_keys("acme", False)] == ["k1", "k2"]

    revoked = await storage.revoke_key("k1", now=300.0)
    assert revoked is not None and revoked.revoke_time == 300.0
    assert (await storage.revoke_key("k1", now=400.0)).revoke_time == 300.0
    assert (await storage.get_key("k1")).revoke_time == 300.0
    assert await storage.revoke_key("nope", now=400.0) is None
    assert [k.key_id for k in await storage.list_keys("acme", False)] == ["k2"]
    assert [k.key_id for k in await storage.list_keys("acme", True)] == ["k1", "k2"]

    with pytest.raises(StorageError):
        await storage.create_key(_key("k2", "acme", 500.0))


async def test_a_certificate_subject_finds_only_a_live_key(storage: SqliteStorage):
    await storage.create_key(_key("old", "acme", 100.0, subject="CN=ci"))
    await storage.create_key(_key("blank", "acme", 100.0))
    assert (await storage.key_for_subject("CN=ci")).key_id == "old"
    await storage.create_key(_key("new", "acme", 200.0, subject="CN=ci"))
    assert (await storage.key_for_subject("CN=ci")).key_id == "new"
    await storage.revoke_key("new", now=300.0)
    assert (await storage.key_for_subject("CN=ci")).key_id == "old"
    await storage.revoke_key("old", now=300.0)
    assert await storage.key_for_subject("CN=ci") is None
    assert await storage.key_for_subject("") is None
    assert await storage.key_for_subject("CN=other") is None


async def test_create_key_keeps_an_existing_tenants_settings(storage: SqliteStorage):
    await storage.put_tenant("acme", Limits(max_watchers=4), [], False, now=10.0)
    await storage.create_key(_key("k1", "acme", 100.0))
    tenant = await storage.get_tenant("acme")
    assert tenant.limits == Limits(max_watchers=4)
    assert not tenant.allow_server_provider_keys
    assert (tenant.create_time, tenant.update_time) == (10.0, 10.0)


# -- tenants and provider keys --------------------------------------------------------------


async def test_put_tenant_sets_and_clears(storage: SqliteStorage):
    assert await storage.get_tenant("acme") is None
    created = await storage.put_tenant(
        "acme", Limits(max_concurrent_jobs=5, daily_cost_usd=2.5), [], None, now=10.0
    )
    assert created.limits == Limits(max_concurrent_jobs=5, daily_cost_usd=2.5)
    assert created.allow_server_provider_keys
    assert (created.create_time, created.update_time) == (10.0, 10.0)

    changed = await storage.put_tenant(
        "acme", Limits(jobs_per_minute=3), ["max_concurrent_jobs"], False, now=20.0
    )
    assert changed.limits == Limits(jobs_per_minute=3, daily_cost_usd=2.5)
    assert not changed.allow_server_provider_keys
    assert (changed.create_time, changed.update_time) == (10.0, 20.0)
    assert await storage.get_tenant("acme") == changed

    kept = await storage.put_tenant("acme", Limits(), [], None, now=30.0)
    assert kept.limits == changed.limits and not kept.allow_server_provider_keys
    cleared = await storage.put_tenant(
        "acme", Limits(), ["jobs_per_minute", "daily_cost_usd"], True, now=40.0
    )
    assert cleared.limits == Limits() and cleared.allow_server_provider_keys

    with pytest.raises(ValueError, match="unknown limits: tenant"):
        await storage.put_tenant("acme", Limits(), ["tenant"], None, now=50.0)

    await storage.put_tenant("beta", Limits(max_candidates=100), [], None, now=60.0)
    assert [t.tenant for t in await storage.list_tenants()] == ["acme", "beta"]
    assert (await storage.list_tenants())[1].limits == Limits(max_candidates=100)


async def test_provider_keys_round_trip(storage: SqliteStorage):
    assert await storage.set_provider_key("acme", "openai", b"sealed") is None
    assert await storage.provider_key("acme", "openai") is None

    await storage.put_tenant("acme", Limits(), [], None, now=1.0)
    await storage.put_tenant("globex", Limits(), [], None, now=1.0)
    await storage.set_provider_key("acme", "openai", b"sealed-1")
    record = await storage.set_provider_key("acme", "anthropic", b"sealed-2")
    assert record.provider_keys == ("anthropic", "openai")
    assert await storage.provider_key("acme", "openai") == b"sealed-1"
    await storage.set_provider_key("acme", "openai", b"sealed-3")
    assert await storage.provider_key("acme", "openai") == b"sealed-3"
    assert await storage.provider_key("globex", "openai") is None

    record = await storage.set_provider_key("acme", "openai", None)
    assert record.provider_keys == ("anthropic",)
    assert await storage.provider_key("acme", "openai") is None
    assert (await storage.get_tenant("acme")).provider_keys == ("anthropic",)
    listed = {t.tenant: t.provider_keys for t in await storage.list_tenants()}
    assert listed == {"acme": ("anthropic",), "globex": ()}


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


async def test_a_new_database_reopens_with_its_data(tmp_path: Path):
    db = tmp_path / "fresh.db"
    storage = SqliteStorage(db, synchronous="NORMAL")
    await storage.put_tenant("acme", Limits(daily_input_tokens=5), [], None, now=1.0)
    await storage.create_key(_key("k1", "acme", 2.0, subject="CN=a"))
    await storage.set_provider_key("acme", "openai", b"sealed")
    await storage.close()

    reopened = SqliteStorage(db, synchronous="NORMAL")
    try:
        tenant = await reopened.get_tenant("acme")
        assert tenant.limits == Limits(daily_input_tokens=5) and tenant.provider_keys == ("openai",)
        assert (await reopened.key_for_subject("CN=a")).key_id == "k1"
    finally:
        await reopened.close()
