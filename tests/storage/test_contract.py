"""The storage contract: what every backend (SQLite, PostgreSQL) must do alike.

Each test runs on both (see conftest.py); the tests at the end are PostgreSQL's own: migrations,
several processes on one database, and its errors in plain words.
"""

from __future__ import annotations

import asyncio
import socket
from dataclasses import replace
from functools import partial
from typing import Protocol

import psycopg
import pytest
from psycopg import sql

from tierank.server.errors import (
    QuotaExceeded,
    StorageDamaged,
    StorageError,
    StorageFull,
    StorageUnavailable,
)
from tierank.server.settings import ServerSettings
from tierank.server.storage.base import (
    DEFAULT_LIMITS,
    CacheEntry,
    DuplicateRequest,
    EventRow,
    JobRecord,
    JobUpdate,
    JournalRow,
    KeyRecord,
    Limits,
    OperationRecord,
    QualificationRecord,
    Reservation,
    Settlement,
    Spend,
    Storage,
    VerdictAudit,
)
from tierank.server.storage.postgres import PostgresStorage, migrate, migration_status
from tierank.server.storage.postgres.connection import plain_error
from tierank.server.storage.postgres.migrations import MIGRATIONS
from tierank.v1 import rank_pb2

DAY = "2026-05-09"
OTHER_DAY = "2026-05-08"
PENDING = rank_pb2.JOB_STATE_PENDING
RUNNING = rank_pb2.JOB_STATE_RUNNING
SUCCEEDED = rank_pb2.JOB_STATE_SUCCEEDED
FAILED = rank_pb2.JOB_STATE_FAILED
CANCELLED = rank_pb2.JOB_STATE_CANCELLED
PAGE = 1 << 20
# A replica whose statements may run as long as a server's do by default.
connect = partial(
    PostgresStorage.connect, statement_timeout_s=ServerSettings().db_statement_timeout_s
)


class Backend(Protocol):
    name: str

    async def open(self) -> Storage: ...


def _job(
    tenant: str,
    job_id: str,
    create_time: float = 1000.0,
    request_id: str = "",
    query: str = "q",
    state: int = PENDING,
) -> JobRecord:
    return JobRecord(
        job_id=job_id,
        tenant=tenant,
        request_id=request_id,
        state=state,
        spec=b"spec\x00\xff",
        query=query,
        candidate_count=3,
        create_time=create_time,
        update_time=create_time,
    )


def _event(sequence: int = 1, kind: str = "accepted", payload: bytes | None = None) -> EventRow:
    return EventRow(sequence, kind, 1000.0 + sequence, payload or f"event {sequence}".encode())


def _key(key_id: str, tenant: str, create_time: float, subject: str = "") -> KeyRecord:
    return KeyRecord(
        key_id=key_id,
        tenant=tenant,
        role="member",
        display_name=f"key {key_id}",
        secret_hash=bytes(range(32)),
        create_time=create_time,
        certificate_subject=subject,
    )


def _reservation(rid: str, tokens: int, tenant: str = "acme", day: str = DAY) -> Reservation:
    return Reservation(rid, tenant, day, "judge-a", Spend(calls=1, input_tokens=tokens))


async def _stored_job_ids(storage: Storage, tenant: str) -> list[str]:
    return sorted(j.job_id for j in await storage.list_jobs(tenant, None, 1000, None))


async def _sequences(storage: Storage, tenant: str, job_id: str, **page: int) -> list[int]:
    after, limit, max_bytes = page.get("after", 0), page.get("limit", 100), page.get("max_bytes")
    events = await storage.read_events(tenant, job_id, after, limit, max_bytes or PAGE)
    return [e.sequence for e in events]


# -- jobs -----------------------------------------------------------------------------------


async def test_a_created_job_reads_back_with_its_first_event(storage: Storage):
    job = _job("acme", "j1", request_id="r1")
    created = await storage.create_job(job, _event(7))
    assert created == JobRecord(**{**job.__dict__, "last_sequence": 7})
    assert await storage.get_job("acme", "j1") == created
    assert await storage.read_events("acme", "j1", 0, 10, PAGE) == [_event(7)]


async def test_a_jobs_trace_context_reads_back_wherever_the_job_is_read(storage: Storage):
    traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
    job = JobRecord(**{**_job("acme", "j1").__dict__, "trace_context": traceparent})
    await storage.create_job(job, _event())
    assert (await storage.get_job("acme", "j1")).trace_context == traceparent
    assert [j.trace_context for j in await storage.list_jobs("acme", None, 10, None)] == [
        traceparent
    ]
    # What a replica resuming the job after a failover reads.
    (claim,) = await storage.claim_jobs("replica-b", 10.0, 5)
    assert claim.job.trace_context == traceparent


async def test_a_request_id_is_a_duplicate_only_within_its_tenant(storage: Storage):
    first = await storage.create_job(_job("acme", "j1", request_id="same"), _event())
    with pytest.raises(DuplicateRequest) as duplicate:
        await storage.create_job(_job("acme", "j2", request_id="same"), _event())
    assert duplicate.value.existing == first
    # Nothing of the refused job was stored, not even its first event.
    assert await storage.get_job("acme", "j2") is None
    assert await storage.read_events("acme", "j2", 0, 10, PAGE) == []

    await storage.create_job(_job("globex", "g1", request_id="same"), _event())
    # An empty request_id asks for no idempotency at all.
    await storage.create_job(_job("acme", "j3"), _event())
    await storage.create_job(_job("acme", "j4"), _event())
    assert await _stored_job_ids(storage, "acme") == ["j1", "j3", "j4"]
    with pytest.raises(StorageError):
        await storage.create_job(_job("acme", "j1"), _event())


@pytest.mark.parametrize(
    "limits", [Limits(), Limits(max_concurrent_jobs=100)], ids=["free", "quota"]
)
async def test_concurrent_creates_with_one_request_id_make_one_job(
    storage: Storage, limits: Limits
):
    outcomes = await asyncio.gather(
        *(
            storage.create_job(_job("acme", f"j{i:02}", request_id="once"), _event(), limits)
            for i in range(20)
        ),
        return_exceptions=True,
    )
    created = [o for o in outcomes if isinstance(o, JobRecord)]
    duplicates = [o for o in outcomes if isinstance(o, DuplicateRequest)]
    assert len(created) == 1 and len(duplicates) == 19, outcomes
    assert all(d.existing == created[0] for d in duplicates)
    assert await _stored_job_ids(storage, "acme") == [created[0].job_id]
    for i in range(20):
        expected = [1] if f"j{i:02}" == created[0].job_id else []
        assert await _sequences(storage, "acme", f"j{i:02}") == expected


async def test_a_commit_changes_the_job_and_appends_in_one_step(storage: Storage):
    await storage.create_job(_job("acme", "j1"), _event(1))
    await storage.commit(
        "j1",
        JobUpdate(
            events=[_event(2, "progress"), _event(3, "progress")],
            journal=[JournalRow(0, "plan", b"p0")],
            state=RUNNING,
        ),
    )
    job = await storage.get_job("acme", "j1")
    assert (job.state, job.last_sequence, job.update_time) == (RUNNING, 3, 1003.0)
    assert job.create_time == 1000.0

    await storage.commit(
        "j1",
        JobUpdate(
            events=[_event(4, "failed")],
            state=FAILED,
            completion_reason=2,
            error_code=13,
            error_message="judge said \x00 and ✓",
        ),
    )
    job = await storage.get_job("acme", "j1")
    assert (job.state, job.completion_reason, job.error_code) == (FAILED, 2, 13)
    assert job.error_message == "judge said \x00 and ✓" and job.last_sequence == 4
    # A commit without events keeps the job's last sequence and update time.
    await storage.commit("j1", JobUpdate(state=CANCELLED))
    job = await storage.get_job("acme", "j1")
    assert (job.state, job.last_sequence, job.update_time) == (CANCELLED, 4, 1004.0)


async def test_a_failing_commit_stores_nothing(storage: Storage):
    await storage.create_job(_job("acme", "j1"), _event(1))
    await storage.commit("j1", JobUpdate(journal=[JournalRow(0, "plan", b"p0")]))

    doomed = JobUpdate(
        events=[_event(2, "verdict")],
        journal=[JournalRow(1, "verdict", b"v1"), JournalRow(0, "plan", b"again")],
        cache=[CacheEntry("cache-key", b"cached")],
        audit=[VerdictAudit("call-1", b"verdict")],
        state=SUCCEEDED,
    )
    with pytest.raises(StorageError):
        await storage.commit("j1", doomed)

    job = await storage.get_job("acme", "j1")
    assert (job.state, job.last_sequence) == (PENDING, 1)
    assert await _sequences(storage, "acme", "j1") == [1]
    assert await storage.read_journal("j1") == [JournalRow(0, "plan", b"p0")]
    assert await storage.cache_get("cache-key") is None
    assert await storage.read_audit("acme", "j1", "call-1") is None

    # The storage goes on working after the failure.
    await storage.commit("j1", JobUpdate(events=[_event(2, "verdict")], state=SUCCEEDED))
    assert await _sequences(storage, "acme", "j1") == [1, 2]


async def test_read_events_pages_by_count_and_by_bytes(storage: Storage):
    await storage.create_job(_job("acme", "j1"), _event(1, payload=b"a" * 10))
    sizes = {2: 10, 3: 10, 4: 50, 5: 10}
    await storage.commit(
        "j1", JobUpdate(events=[_event(s, payload=b"x" * n) for s, n in sizes.items()])
    )
    assert await _sequences(storage, "acme", "j1") == [1, 2, 3, 4, 5]
    assert await _sequences(storage, "acme", "j1", limit=2) == [1, 2]
    assert await _sequences(storage, "acme", "j1", after=2, limit=2) == [3, 4]
    assert await _sequences(storage, "acme", "j1", after=5) == []
    # 10 + 10 + 10 fit in 30 bytes; the 50-byte event would pass the limit.
    assert await _sequences(storage, "acme", "j1", max_bytes=30) == [1, 2, 3]
    assert await _sequences(storage, "acme", "j1", max_bytes=29) == [1, 2]
    # The first event always comes, however large, and nothing after it that does not fit.
    assert await _sequences(storage, "acme", "j1", after=3, max_bytes=1) == [4]
    assert await _sequences(storage, "acme", "j1", after=3, max_bytes=60) == [4, 5]
    page = await storage.read_events("acme", "j1", 3, 1, PAGE)
    assert page == [_event(4, payload=b"x" * 50)]


async def test_latest_event_is_the_newest_of_the_kinds_asked(storage: Storage):
    await storage.create_job(_job("acme", "j1"), _event(1, "accepted"))
    await storage.commit(
        "j1",
        JobUpdate(
            events=[_event(2, "tiers"), _event(3, "progress"), _event(4, "tiers"), _event(5, "x")]
        ),
    )
    assert await storage.latest_event("acme", "j1", ["tiers"]) == _event(4, "tiers")
    assert (await storage.latest_event("acme", "j1", ["tiers", "progress", "x"])).sequence == 5
    assert (await storage.latest_event("acme", "j1", ["accepted"])).sequence == 1
    assert await storage.latest_event("acme", "j1", ["completed"]) is None
    assert await storage.latest_event("acme", "j1", []) is None


async def test_the_journal_reads_back_in_index_order(storage: Storage):
    await storage.create_job(_job("acme", "j1"), _event())
    await storage.create_job(_job("acme", "j2"), _event())
    await storage.commit(
        "j1", JobUpdate(journal=[JournalRow(2, "verdict", b"v2"), JournalRow(0, "plan", b"p0")])
    )
    await storage.commit("j2", JobUpdate(journal=[JournalRow(0, "plan", b"other")]))
    await storage.commit(
        "j1", JobUpdate(journal=[JournalRow(10, "disable", b""), JournalRow(1, "verdict", b"v1")])
    )
    assert await storage.read_journal("j1") == [
        JournalRow(0, "plan", b"p0"),
        JournalRow(1, "verdict", b"v1"),
        JournalRow(2, "verdict", b"v2"),
        JournalRow(10, "disable", b""),
    ]
    assert await storage.read_journal("missing") == []


async def test_the_verdict_cache_keeps_the_last_payload(storage: Storage):
    assert await storage.cache_get("k1") is None
    await storage.cache_put([CacheEntry("k1", b"one"), CacheEntry("k2", b"two")])
    await storage.cache_put([CacheEntry("k1", b"uno")])
    await storage.cache_put([])
    # Of two entries for one key in one call, the last one wins.
    await storage.cache_put([CacheEntry("k4", b"first"), CacheEntry("k4", b"last")])
    assert await storage.cache_get("k4") == b"last"
    assert await storage.cache_get("k1") == b"uno"
    assert await storage.cache_get("k2") == b"two"

    await storage.create_job(_job("acme", "j1"), _event())
    await storage.commit("j1", JobUpdate(cache=[CacheEntry("k2", b"dos"), CacheEntry("k3", b"")]))
    assert await storage.cache_get("k2") == b"dos"
    assert await storage.cache_get("k3") == b""


async def test_audit_and_verdicts_read_back_exactly(storage: Storage):
    await storage.create_job(_job("acme", "j1", query="solar \x00 panels ☀"), _event())
    await storage.create_job(_job("acme", "j2"), _event())
    first = VerdictAudit("c1", b"\x00verdict-1", "prompt \x00 with 🙂", "answer\x00")
    second = VerdictAudit("c2", b"verdict-2")
    await storage.commit("j1", JobUpdate(audit=[first, second]))
    await storage.commit("j2", JobUpdate(audit=[VerdictAudit("c1", b"other job")]))

    assert (await storage.get_job("acme", "j1")).query == "solar \x00 panels ☀"
    assert await storage.read_audit("acme", "j1", "c1") == first
    assert await storage.read_audit("acme", "j1", "c2") == second
    assert await storage.read_audit("acme", "j1", "c3") is None
    assert await storage.read_verdicts("j1", ["c2", "c1", "c9"]) == {
        "c1": b"\x00verdict-1",
        "c2": b"verdict-2",
    }
    assert await storage.read_verdicts("j2", ["c1"]) == {"c1": b"other job"}
    assert await storage.read_verdicts("j1", []) == {}


async def test_unfinished_jobs_are_every_tenants_open_jobs(storage: Storage):
    for job_id, tenant, state in [
        ("j3", "acme", PENDING),
        ("j1", "globex", RUNNING),
        ("j2", "acme", SUCCEEDED),
        ("j4", "acme", FAILED),
        ("j5", "globex", CANCELLED),
        ("j0", "acme", RUNNING),
    ]:
        await storage.create_job(_job(tenant, job_id, state=state), _event())
    assert [j.job_id for j in await storage.unfinished_jobs()] == ["j0", "j1", "j3"]
    await storage.commit("j3", JobUpdate(state=SUCCEEDED))
    assert [j.job_id for j in await storage.unfinished_jobs()] == ["j0", "j1"]
    assert (await storage.usage("acme", DAY)).unfinished_jobs == 1


async def test_list_jobs_pages_newest_first_in_byte_order(storage: Storage):
    # In byte order "B" < "a" < "b" < "é", whatever the database's locale says.
    for job_id, state in [("a1", PENDING), ("B2", SUCCEEDED), ("b3", PENDING), ("é4", PENDING)]:
        await storage.create_job(_job("acme", job_id, state=state), _event())
    await storage.create_job(_job("globex", "c5"), _event())

    async def ids(state: int | None, size: int, before: str | None) -> list[str]:
        return [j.job_id for j in await storage.list_jobs("acme", state, size, before)]

    assert await ids(None, 10, None) == ["é4", "b3", "a1", "B2"]
    assert await ids(None, 2, None) == ["é4", "b3"]
    assert await ids(None, 2, "b3") == ["a1", "B2"]
    assert await ids(None, 2, "B2") == []
    assert await ids(PENDING, 10, "é4") == ["b3", "a1"]
    assert await ids(SUCCEEDED, 10, None) == ["B2"]


async def test_data_survives_reopening(backend: Backend):
    storage = await backend.open()
    try:
        await storage.put_tenant("acme", Limits(daily_input_tokens=5), [], None, now=1.0)
        await storage.create_key(_key("k1", "acme", 2.0, subject="CN=a"))
        await storage.set_provider_key("acme", "openai", b"sealed")
        await storage.create_job(_job("acme", "j1", request_id="r"), _event())
        await storage.commit("j1", JobUpdate(journal=[JournalRow(0, "plan", b"p")]))
        await storage.reserve_spend(_reservation("r1", 5))
    finally:
        await storage.close()

    reopened = await backend.open()
    try:
        tenant = await reopened.get_tenant("acme")
        assert tenant.limits == replace(DEFAULT_LIMITS, daily_input_tokens=5)
        assert tenant.provider_keys == ("openai",)
        assert (await reopened.key_for_subject("CN=a")).key_id == "k1"
        assert await reopened.read_journal("j1") == [JournalRow(0, "plan", b"p")]
        with pytest.raises(DuplicateRequest):
            await reopened.create_job(_job("acme", "j2", request_id="r"), _event())
        # The reservation's replica is gone: the next one's first heartbeat settles it.
        await reopened.heartbeat("replica-b", 10.0)
        report = await reopened.usage("acme", DAY)
        assert (report.today, report.reserved) == ({"judge-a": Spend(1, 5)}, Spend())
    finally:
        await reopened.close()


# -- isolation ------------------------------------------------------------------------------


async def test_another_tenants_job_reads_exactly_like_a_missing_one(storage: Storage):
    await storage.create_job(_job("acme", "j1"), _event(1))
    audit = VerdictAudit("call-1", b"verdict", "prompt", "answer")
    await storage.commit("j1", JobUpdate(events=[_event(2, "verdict")], audit=[audit]))

    assert (await storage.get_job("acme", "j1")).job_id == "j1"
    assert await _sequences(storage, "acme", "j1") == [1, 2]
    assert (await storage.latest_event("acme", "j1", ["verdict"])).sequence == 2
    assert await storage.read_audit("acme", "j1", "call-1") == audit

    for tenant, job_id in (("globex", "j1"), ("acme", "missing"), ("globex", "missing")):
        assert await storage.get_job(tenant, job_id) is None
        assert await storage.read_events(tenant, job_id, 0, 10, PAGE) == []
        assert await storage.latest_event(tenant, job_id, ["accepted", "verdict"]) is None
        assert await storage.read_audit(tenant, job_id, "call-1") is None
    assert await storage.list_jobs("globex", None, 10, None) == []


# -- job quotas -----------------------------------------------------------------------------


async def test_concurrent_creates_never_pass_max_concurrent_jobs(storage: Storage):
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
    assert await storage.read_events("acme", refused_id, 0, 10, PAGE) == []
    assert (await storage.usage("acme", DAY)).unfinished_jobs == 3

    await storage.create_job(_job("globex", "g1"), _event(), limits)

    with pytest.raises(QuotaExceeded):
        await storage.create_job(_job("acme", "late"), _event(), limits)
    await storage.commit(created[0].job_id, JobUpdate(state=SUCCEEDED))
    await storage.create_job(_job("acme", "late"), _event(), limits)
    with pytest.raises(QuotaExceeded):
        await storage.create_job(_job("acme", "later"), _event(), limits)
    assert (await storage.usage("acme", DAY)).unfinished_jobs == 3


async def test_a_reused_request_id_is_a_duplicate_even_at_the_limit(storage: Storage):
    limits = Limits(max_concurrent_jobs=1)
    first = await storage.create_job(_job("acme", "j1", request_id="same"), _event(), limits)
    with pytest.raises(DuplicateRequest) as duplicate:
        await storage.create_job(_job("acme", "j2", request_id="same"), _event(), limits)
    assert duplicate.value.existing == first


async def test_jobs_per_minute_says_when_the_oldest_leaves_the_window(storage: Storage):
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

    # A limit of zero: no job, and no time at which one would fit.
    with pytest.raises(QuotaExceeded) as refused:
        await storage.create_job(_job("acme", "j4", 2000.0), _event(), Limits(jobs_per_minute=0))
    assert refused.value.retry_after_s is None


# -- spend ----------------------------------------------------------------------------------


async def test_concurrent_reservations_never_pass_a_daily_limit(storage: Storage):
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

    # Their replica (no owner named) is not alive: a heartbeat settles them at their reservation.
    await storage.heartbeat("next-replica", 10.0)
    await storage.heartbeat("next-replica", 10.0)
    report = await storage.usage("acme", DAY)
    assert report.today == {"judge-a": Spend(11, 980, 14, 1.0)}
    assert report.reserved == Spend()
    with pytest.raises(QuotaExceeded):
        await storage.reserve_spend(_reservation("after-release", 21))
    await storage.reserve_spend(_reservation("last", 20))


async def test_a_commit_settles_its_answers_reservations_with_them(storage: Storage):
    await storage.create_job(_job("acme", "j1"), _event(1))
    for rid in ("a", "b", "c", "kept"):
        await storage.reserve_spend(_reservation(rid, 100))
    # Two settlements of one (tenant, day, judge) in one commit add up; an unknown id is ignored.
    spent = Spend(calls=1, input_tokens=40, output_tokens=5, cost_usd=0.25)
    settlements = [Settlement("a", spent), Settlement("b", spent), Settlement("gone", spent)]
    await storage.commit("j1", JobUpdate(events=[_event(2, "verdict")], settlements=settlements))
    report = await storage.usage("acme", DAY)
    assert report.today == {"judge-a": Spend(2, 80, 10, 0.5)}
    assert report.reserved == Spend(calls=2, input_tokens=200)

    # A commit that fails settles nothing: the reservation stays held with the answer unstored.
    doomed = JobUpdate(
        journal=[JournalRow(0, "plan", b"p"), JournalRow(0, "plan", b"again")],
        settlements=[Settlement("c", spent)],
    )
    with pytest.raises(StorageError):
        await storage.commit("j1", doomed)
    report = await storage.usage("acme", DAY)
    assert report.today == {"judge-a": Spend(2, 80, 10, 0.5)}
    assert report.reserved == Spend(calls=2, input_tokens=200)
    await storage.settle_spend("c", spent)
    assert (await storage.usage("acme", DAY)).today == {"judge-a": Spend(3, 120, 15, 0.75)}


async def test_other_days_and_tenants_do_not_count(storage: Storage):
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
    empty = await storage.usage("nobody", DAY)
    assert (empty.today, empty.total, empty.reserved, empty.unfinished_jobs) == ({}, {}, Spend(), 0)


async def test_a_dead_replicas_reservations_are_settled_summed_per_judge(backend: Backend):
    first = await backend.open()
    try:
        for i in range(3):
            await first.reserve_spend(
                Reservation(f"r{i}", "acme", DAY, "j", Spend(1, 10, 2, 0.25), owner="gone")
            )
        await first.reserve_spend(
            Reservation("r-old", "acme", OTHER_DAY, "j", Spend(1, 1), owner="gone")
        )
    finally:
        await first.close()
    storage = await backend.open()
    try:
        await storage.heartbeat("next", 10.0)
        report = await storage.usage("acme", DAY)
    finally:
        await storage.close()
    assert report.today == {"j": Spend(3, 30, 6, 0.75)}
    assert report.total == {"j": Spend(4, 31, 6, 0.75)}


async def test_call_and_cost_limits(storage: Storage):
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

    # Without limits anything goes; what was held meanwhile counts once a limit returns.
    await storage.put_tenant("acme", Limits(), ["daily_judge_calls", "daily_cost_usd"], None, 2.0)
    await storage.reserve_spend(Reservation("r12", "acme", DAY, "j", Spend(calls=10)))
    await storage.put_tenant("acme", Limits(daily_judge_calls=23), [], None, now=3.0)
    with pytest.raises(QuotaExceeded):
        await storage.reserve_spend(Reservation("r13", "acme", DAY, "j", Spend(calls=2)))
    await storage.reserve_spend(Reservation("r14", "acme", DAY, "j", Spend(calls=1)))
    assert (await storage.usage("acme", DAY)).reserved.calls == 23


# -- keys -----------------------------------------------------------------------------------


async def test_keys_create_list_and_revoke(storage: Storage):
    await storage.create_key(_key("k2", "acme", 200.0))
    await storage.create_key(_key("k1", "acme", 100.0, subject="CN=ci"))
    await storage.create_key(_key("k3", "globex", 150.0))

    # The tenant was made by its first key, with the default limits.
    tenant = await storage.get_tenant("acme")
    assert tenant is not None and tenant.create_time == 200.0
    assert tenant.limits == DEFAULT_LIMITS and tenant.allow_server_provider_keys
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


async def test_a_certificate_subject_finds_only_a_live_key(storage: Storage):
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


async def test_create_key_keeps_an_existing_tenants_settings(storage: Storage):
    await storage.put_tenant("acme", Limits(max_watchers=4), [], False, now=10.0)
    await storage.create_key(_key("k1", "acme", 100.0))
    tenant = await storage.get_tenant("acme")
    assert tenant.limits == replace(DEFAULT_LIMITS, max_watchers=4)
    assert not tenant.allow_server_provider_keys
    assert (tenant.create_time, tenant.update_time) == (10.0, 10.0)


# -- tenants and provider keys --------------------------------------------------------------


async def test_put_tenant_sets_and_clears(storage: Storage):
    assert await storage.get_tenant("acme") is None
    created = await storage.put_tenant(
        "acme", Limits(max_concurrent_jobs=5, daily_cost_usd=2.5), [], None, now=10.0
    )
    # The limits not named are the defaults.
    assert created.limits == replace(DEFAULT_LIMITS, max_concurrent_jobs=5, daily_cost_usd=2.5)
    assert created.allow_server_provider_keys
    assert (created.create_time, created.update_time) == (10.0, 10.0)

    changed = await storage.put_tenant(
        "acme", Limits(jobs_per_minute=3), ["max_concurrent_jobs", "max_watchers"], False, 20.0
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

    big = {"daily_input_tokens": 10**12, "max_candidates": 100}
    await storage.put_tenant("beta", Limits(**big), [], None, now=60.0)
    await storage.put_tenant("Zeta", Limits(), [], None, now=60.0)
    assert [t.tenant for t in await storage.list_tenants()] == ["Zeta", "acme", "beta"]
    assert (await storage.list_tenants())[2].limits == replace(DEFAULT_LIMITS, **big)


async def test_provider_keys_round_trip(storage: Storage):
    assert await storage.set_provider_key("acme", "openai", b"sealed") is None
    assert await storage.provider_key("acme", "openai") is None

    await storage.put_tenant("acme", Limits(), [], None, now=1.0)
    await storage.put_tenant("globex", Limits(), [], None, now=1.0)
    await storage.set_provider_key("acme", "openai", b"sealed-1")
    record = await storage.set_provider_key("acme", "anthropic", b"sealed-2")
    assert record.provider_keys == ("anthropic", "openai")
    assert await storage.provider_key("acme", "openai") == b"sealed-1"
    await storage.set_provider_key("acme", "openai", b"sealed-3\x00")
    assert await storage.provider_key("acme", "openai") == b"sealed-3\x00"
    assert await storage.provider_key("globex", "openai") is None

    record = await storage.set_provider_key("acme", "openai", None)
    assert record.provider_keys == ("anthropic",)
    assert await storage.provider_key("acme", "openai") is None
    assert (await storage.get_tenant("acme")).provider_keys == ("anthropic",)
    listed = {t.tenant: t.provider_keys for t in await storage.list_tenants()}
    assert listed == {"acme": ("anthropic",), "globex": ()}


# -- PostgreSQL: migrations, several processes, errors --------------------------------------


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


async def _count(url: str, schema: str, query: str) -> list[tuple[object, ...]]:
    async with await psycopg.AsyncConnection.connect(url) as conn:
        await conn.execute(sql.SQL("SET search_path TO {}").format(sql.Identifier(schema)))
        return await (await conn.execute(query)).fetchall()


async def test_servers_starting_together_apply_each_migration_once(
    postgres_url: str, pg_schema: str
):
    versions = [m.version for m in MIGRATIONS]
    assert await migration_status(postgres_url, pg_schema) == [
        (m.version, m.description, False) for m in MIGRATIONS
    ]
    opened = await asyncio.gather(
        *(connect(postgres_url, pool_size=2, schema=pg_schema) for _ in range(4))
    )
    try:
        rows = await _count(
            postgres_url, pg_schema, "SELECT version FROM schema_migrations ORDER BY version"
        )
        assert [version for (version,) in rows] == versions
        assert all(applied for *_, applied in await migration_status(postgres_url, pg_schema))
        assert await migrate(postgres_url, pg_schema) == []
        # Each of them works on the one set of tables.
        for i, storage in enumerate(opened):
            await storage.create_job(_job("acme", f"j{i}"), _event())
        assert await _stored_job_ids(opened[0], "acme") == ["j0", "j1", "j2", "j3"]
    finally:
        for storage in opened:
            await storage.close()


async def test_migrate_applies_what_is_pending_and_status_writes_nothing(
    postgres_url: str, pg_schema: str
):
    assert not any(applied for *_, applied in await migration_status(postgres_url, pg_schema))
    # Status created neither the schema nor the ledger.
    rows = await _count(
        postgres_url, "public", f"SELECT 1 FROM pg_namespace WHERE nspname = '{pg_schema}'"
    )
    assert rows == []
    assert await migrate(postgres_url, pg_schema) == [m.version for m in MIGRATIONS]
    assert await migrate(postgres_url, pg_schema) == []
    storage = await connect(postgres_url, pool_size=1, schema=pg_schema)
    await storage.close()
    rows = await _count(postgres_url, pg_schema, "SELECT count(*) FROM schema_migrations")
    assert rows == [(len(MIGRATIONS),)]


async def test_two_replicas_share_one_tenants_quotas(postgres_url: str, pg_schema: str):
    replicas = [await connect(postgres_url, pool_size=3, schema=pg_schema) for _ in range(2)]
    try:
        await replicas[0].put_tenant("acme", Limits(daily_judge_calls=7), [], None, now=1.0)
        limits = Limits(max_concurrent_jobs=4)
        outcomes = await asyncio.gather(
            *(
                replicas[i % 2].create_job(_job("acme", f"j{i:02}"), _event(), limits)
                for i in range(12)
            ),
            *(
                replicas[i % 2].reserve_spend(
                    Reservation(f"r{i:02}", "acme", DAY, "j", Spend(calls=1))
                )
                for i in range(20)
            ),
            return_exceptions=True,
        )
        jobs, reservations = outcomes[:12], outcomes[12:]
        assert sum(isinstance(o, JobRecord) for o in jobs) == 4, jobs
        assert all(isinstance(o, JobRecord | QuotaExceeded) for o in jobs), jobs
        assert sum(o is None for o in reservations) == 7, reservations
        assert all(o is None or isinstance(o, QuotaExceeded) for o in reservations)
        report = await replicas[1].usage("acme", DAY)
        assert (report.unfinished_jobs, report.reserved.calls) == (4, 7)
    finally:
        for replica in replicas:
            await replica.close()


async def test_an_unreachable_database_is_reported_in_plain_words():
    url = f"postgresql://postgres@127.0.0.1:{_free_port()}/test"
    for attempt in (
        connect(url, pool_size=1),
        migrate(url),
        migration_status(url),
    ):
        with pytest.raises(StorageError) as failed:
            await attempt
        message = str(failed.value)
        assert message.startswith("the database is unreachable: "), message
        assert "Error" not in message and "psycopg" not in message


async def test_a_statement_past_its_timeout_fails_in_plain_words(postgres_url: str, pg_schema: str):
    storage = await PostgresStorage.connect(
        postgres_url, pool_size=1, statement_timeout_s=0.2, schema=pg_schema
    )
    try:
        await storage.create_job(_job("acme", "j1"), _event())
        async with await psycopg.AsyncConnection.connect(postgres_url) as blocker:
            await blocker.execute(
                sql.SQL("LOCK TABLE {}.jobs IN ACCESS EXCLUSIVE MODE").format(
                    sql.Identifier(pg_schema)
                )
            )
            with pytest.raises(StorageError) as failed:
                await storage.get_job("acme", "j1")
            assert str(failed.value).startswith("the database gave up on a statement: ")
            await blocker.rollback()
        # The pool's connection survived the cancelled statement.
        assert (await storage.get_job("acme", "j1")).job_id == "j1"
    finally:
        await storage.close()


async def test_connections_the_server_closed_are_replaced_before_use(
    postgres_url: str, pg_schema: str
):
    """What a restart of PostgreSQL does to a pool: every idle connection is terminated."""
    name = f"tierank-{pg_schema}"
    url = f"{postgres_url}{'&' if '?' in postgres_url else '?'}application_name={name}"
    storage = await connect(url, pool_size=3, schema=pg_schema)
    try:
        await storage.create_job(_job("acme", "j1"), _event())
        async with await psycopg.AsyncConnection.connect(postgres_url, autocommit=True) as admin:
            ended = await admin.execute(
                "SELECT pg_terminate_backend(pid, 5000) FROM pg_stat_activity "
                "WHERE application_name = %s",
                (name,),
            )
            assert [row for (row,) in await ended.fetchall()] == [True] * 3
        for _ in range(6):
            assert (await storage.get_job("acme", "j1")).job_id == "j1"
        await storage.commit("j1", JobUpdate(state=SUCCEEDED))
    finally:
        await storage.close()


@pytest.mark.parametrize(
    ("error", "kind", "start"),
    [
        (psycopg.errors.DiskFull("could not extend file"), StorageFull, "the disk holding"),
        (psycopg.errors.DataCorrupted("invalid page"), StorageDamaged, "the database is damaged"),
        (psycopg.errors.IndexCorrupted("bad index"), StorageDamaged, "the database is damaged"),
        (
            psycopg.errors.AdminShutdown("terminating"),
            StorageUnavailable,
            "the database is unreachable",
        ),
        (
            psycopg.OperationalError("connection reset"),
            StorageUnavailable,
            "the database is unreachable",
        ),
        (psycopg.errors.UniqueViolation("duplicate key"), StorageError, "the database failed"),
    ],
)
def test_driver_errors_become_plain_words(error: psycopg.Error, kind: type, start: str):
    plain = plain_error(error)
    assert type(plain) is kind
    assert str(plain).startswith(start) and str(error) in str(plain)
    assert type(error).__name__ not in str(plain)


# -- judge qualifications ---------------------------------------------------------------------


async def test_qualifications_list_newest_first_per_tenant_and_judge(storage: Storage):
    def record(qid: str, tenant: str, judge: str, at: float, usable: bool) -> QualificationRecord:
        return QualificationRecord(qid, tenant, judge, at, usable, 1.5 if usable else 0.0, b"\x00r")

    for made in [
        record("q1", "acme", "oracle/noise=1", 1.0, True),
        record("q2", "acme", "oracle/noise=9", 2.0, False),
        record("q3", "acme", "oracle/noise=1", 3.0, False),
        record("q4", "globex", "oracle/noise=1", 4.0, True),
    ]:
        await storage.put_qualification(made)
    listed = await storage.list_qualifications("acme", None, 10)
    assert [q.qualification_id for q in listed] == ["q3", "q2", "q1"]
    latest = await storage.list_qualifications("acme", "oracle/noise=1", 1)
    assert latest == [record("q3", "acme", "oracle/noise=1", 3.0, False)]
    assert [q.qualification_id for q in await storage.list_qualifications("globex", None, 10)] == [
        "q4"
    ]
    assert await storage.list_qualifications("nobody", None, 10) == []


# -- operations -------------------------------------------------------------------------------


def _operation(tenant: str, operation_id: str, request_id: str = "", owner: str = "me"):
    return OperationRecord(
        operation_id=operation_id,
        tenant=tenant,
        request_id=request_id,
        request_digest=f"digest of {operation_id}",
        method="FillQrels",
        state=RUNNING,
        owner=owner,
        create_time=1000.0,
        update_time=1000.0,
        progress=b"p0",
    )


async def test_operations_are_per_tenant_and_idempotent_on_request_id(storage: Storage):
    first = _operation("acme", "op1", request_id="r")
    assert await storage.create_operation(first) == first
    # The same request_id gives back the first operation; another tenant's is its own.
    assert await storage.create_operation(_operation("acme", "op2", request_id="r")) == first
    assert await storage.create_operation(_operation("other", "op3", request_id="r"))
    await storage.create_operation(_operation("acme", "op4"))
    await storage.create_operation(_operation("acme", "op5"))
    assert await storage.get_operation("acme", "op1") == first
    assert await storage.get_operation("other", "op1") is None
    assert await storage.get_operation("acme", "op2") is None
    page = await storage.list_operations("acme", 2, None)
    assert [o.operation_id for o in page] == ["op5", "op4"]
    rest = await storage.list_operations("acme", 2, "op4")
    assert [o.operation_id for o in rest] == ["op1"]


async def test_an_operation_records_progress_a_cancel_and_its_end_once(storage: Storage):
    await storage.create_operation(_operation("acme", "op1"))
    assert await storage.update_operation("op1", "me", b"p1") is False
    assert await storage.update_operation("op1", "someone else", b"px") is False
    assert await storage.request_operation_cancel("other", "op1") is False
    assert await storage.request_operation_cancel("acme", "op1") is True
    assert await storage.update_operation("op1", "me", b"p2") is True
    stored = await storage.get_operation("acme", "op1")
    assert stored is not None and stored.progress == b"p2" and stored.cancel_requested
    await storage.finish_operation("op1", "me", SUCCEEDED, b"p3", b"result\x00", 0, "")
    # Ended: nothing changes it any more.
    await storage.finish_operation("op1", "me", FAILED, b"p4", b"", 10, "late")
    assert await storage.update_operation("op1", "me", b"p5") is False
    assert await storage.request_operation_cancel("acme", "op1") is False
    ended = await storage.get_operation("acme", "op1")
    assert ended is not None
    assert (ended.state, ended.progress, ended.result) == (SUCCEEDED, b"p3", b"result\x00")
    listed = await storage.list_operations("acme", 10, None)
    assert listed[0].result == b""  # listings leave results out


async def test_operations_of_a_server_that_stopped_are_ended(backend: Backend):
    first = await backend.open()
    try:
        await first.heartbeat("old", 10.0)
        await first.create_operation(_operation("acme", "op1", owner="old"))
        await first.create_operation(_operation("acme", "op2", owner="old"))
        await first.finish_operation("op2", "old", SUCCEEDED, b"done")
    finally:
        await first.close()
    storage = await backend.open()
    try:
        await storage.heartbeat("new", 10.0)
        await storage.create_operation(_operation("acme", "op3", owner="new"))
        if backend.name == "postgres":
            # "old" is still alive: its operations are its own until its heartbeat lapses.
            assert await storage.end_orphaned_operations("new", FAILED, 10, "stopped") == 0
            await storage.leave("old")
        assert await storage.end_orphaned_operations("new", FAILED, 10, "stopped ✗") == 1
        ended = await storage.get_operation("acme", "op1")
        assert ended is not None
        assert (ended.state, ended.error_code, ended.error_message) == (FAILED, 10, "stopped ✗")
        assert (await storage.get_operation("acme", "op2")).state == SUCCEEDED
        assert (await storage.get_operation("acme", "op3")).state == RUNNING
    finally:
        await storage.close()


async def test_a_qualification_is_deleted_only_by_its_tenant(storage: Storage):
    made = QualificationRecord("q1", "acme", "oracle/noise=1", 1.0, False, 0.0, b"\x00r")
    await storage.put_qualification(made)
    assert await storage.delete_qualification("globex", "q1") is None
    assert await storage.list_qualifications("acme", None, 10) == [made]
    assert await storage.delete_qualification("acme", "q1") == made
    assert await storage.list_qualifications("acme", None, 10) == []
    assert await storage.delete_qualification("acme", "q1") is None
