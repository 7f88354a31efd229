"""The storage interface: SQLite, the embedded default, for one server; PostgreSQL for one or
several replicas of it, which share jobs under leases.

Storage is proto-agnostic: specs and events are opaque bytes, so a backend never needs to know
the wire types. Every method that writes is one transaction: it is durable when it returns.

The interface is split by role (JobStore, LeaseStore, TenantStore, KeyStore, SpendStore, ...):
each consumer is typed against the roles it uses, and `Storage`, every role together, is what a
backend implements.
"""

from __future__ import annotations

import abc
import enum
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol

import anyio


@dataclass(frozen=True)
class JobRecord:
    job_id: str
    tenant: str
    request_id: str
    state: int
    spec: bytes
    query: str
    candidate_count: int
    create_time: float
    update_time: float
    last_sequence: int = 0
    completion_reason: int = 0
    error_code: int = 0
    error_message: str = ""
    # The W3C traceparent of the call that created the job, when tracing was on: every later
    # run of the job, on any replica, continues that trace.
    trace_context: str = ""


@dataclass(frozen=True)
class Lease:
    """A replica's right to run a job. Every commit a runner makes carries it, and storage
    refuses the commit (LeaseLost) once another replica has claimed the job: a claim raises the
    epoch, so a replica that held an older one can never write into the job again."""

    job_id: str
    owner: str
    epoch: int


@dataclass(frozen=True)
class Claim:
    """A job claimed to run here, and whether a client asked to cancel it meanwhile."""

    job: JobRecord
    lease: Lease
    cancel_requested: bool = False


@dataclass(frozen=True)
class Membership:
    """What a replica's heartbeat reads back: how many replicas are alive and not draining
    (this one included, unless it drains) and how many jobs are unfinished, from which it
    takes its share."""

    live_replicas: int
    unfinished_jobs: int


@dataclass(frozen=True)
class UnfinishedCounts:
    """Jobs and studies that have not ended: (tenant, state) -> how many."""

    jobs: dict[tuple[str, int], int]
    studies: dict[tuple[str, int], int]


@dataclass(frozen=True)
class Change:
    """A wake-up from another replica: `kind` is EVENTS (`job_id` has events up to `sequence`),
    CANCEL (a client asked to cancel `job_id`), FREED (`job_id` can be claimed now) or RESYNC
    (listening (re)started: changes may have been missed, so look at storage again)."""

    kind: str
    job_id: str
    sequence: int = 0


EVENTS, CANCEL, FREED, RESYNC = "events", "cancel", "freed", "resync"


@dataclass(frozen=True)
class EventRow:
    sequence: int
    kind: str
    time: float
    payload: bytes


@dataclass(frozen=True)
class JournalRow:
    """One step of a tournament, replayed in order to rebuild it after a restart."""

    index: int
    kind: str  # "plan", "verdict" or "disable"
    payload: bytes


@dataclass(frozen=True)
class CacheEntry:
    key: str
    payload: bytes


@dataclass(frozen=True)
class VerdictAudit:
    """A verdict as recorded, with the prompt the judge saw and its raw answer."""

    call_id: str
    verdict: bytes
    prompt: str = ""
    raw_answer: str = ""


@dataclass(frozen=True)
class JobUpdate:
    """What one commit changes about a job, all or nothing."""

    events: Sequence[EventRow] = ()
    journal: Sequence[JournalRow] = ()
    cache: Sequence[CacheEntry] = ()
    state: int | None = None
    completion_reason: int | None = None
    error_code: int | None = None
    error_message: str | None = None
    audit: Sequence[VerdictAudit] = ()
    # Reservations the committed answers settle, with the answers (Storage.settle_spend).
    settlements: Sequence[Settlement] = ()


@dataclass(frozen=True)
class Limits:
    """A tenant's quotas; None is no limit. Field names are the API's (Quota) and the CLI's."""

    max_concurrent_jobs: int | None = None
    max_candidates: int | None = None
    max_watchers: int | None = None
    jobs_per_minute: int | None = None
    daily_judge_calls: int | None = None
    daily_input_tokens: int | None = None
    daily_cost_usd: float | None = None

    def given(self) -> dict[str, int | float]:
        """The limits that are set (not None), by name, in field order."""
        return {name: value for name, value in vars(self).items() if value is not None}


LIMIT_NAMES = tuple(Limits.__dataclass_fields__)

# What a tenant may use when it is created (by `tenants set`) without naming
# these limits: enough for a team's work, bounded so that one tenant cannot crowd out the others
# (bench/tenant_fairness.py measures what a tenant at these limits costs another). The operator
# changes or removes them per tenant (`tenants set`, `--clear`). The unauthenticated dev
# server's one tenant is never created, and has none.
DEFAULT_LIMITS = Limits(max_concurrent_jobs=100, max_watchers=200)


@dataclass(frozen=True)
class TenantRecord:
    tenant: str
    limits: Limits
    allow_server_provider_keys: bool
    create_time: float
    update_time: float
    # Providers the tenant has its own (encrypted) credentials for.
    provider_keys: tuple[str, ...] = ()


@dataclass(frozen=True)
class KeyRecord:
    """An API key as stored: its id and the hash of its secret, never the secret."""

    key_id: str
    tenant: str
    role: str  # "member", "admin" or "operator"
    display_name: str
    secret_hash: bytes
    create_time: float
    revoke_time: float | None = None
    certificate_subject: str = ""


@dataclass(frozen=True)
class Spend:
    calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float = 0.0


@dataclass(frozen=True)
class Reservation:
    """A judge call's worst-case spend, held against its tenant's daily limits until settled."""

    reservation_id: str
    tenant: str
    day: str  # UTC, YYYY-MM-DD
    judge: str
    spend: Spend
    # The replica whose call it holds: a replica that stops beating has its reservations
    # settled (at the reserved spend) by the others' heartbeats.
    owner: str = ""


@dataclass(frozen=True)
class Settlement:
    """What a reserved call really spent, to settle its reservation with."""

    reservation_id: str
    actual: Spend


@dataclass(frozen=True)
class QualificationRecord:
    """A judge's qualification against human labels, stored for its tenant; `payload` is the
    whole report (opaque here), `usable` and `weight` what jobs decide by."""

    qualification_id: str
    tenant: str
    judge_identity: str
    create_time: float
    usable: bool
    weight: float
    payload: bytes


@dataclass(frozen=True)
class OperationRecord:
    """A long-running request (QualifyJudge, FillQrels) as stored: its state, its progress and
    result (opaque here), and the replica that runs it (`owner`). The request itself is kept
    only as a digest, to tell a retry with the same request_id from a different request."""

    operation_id: str
    tenant: str
    request_id: str
    request_digest: str
    method: str
    state: int
    owner: str
    create_time: float
    update_time: float
    progress: bytes = b""
    result: bytes = b""
    error_code: int = 0
    error_message: str = ""
    cancel_requested: bool = False


@dataclass(frozen=True)
class StudyRecord:
    """A study as stored: its spec, inputs' counts, progress and final report are opaque
    bytes (StudySpec, StudyInputs, StudyProgress, StudyReport); `owner` is the replica that
    drives it while its lease (`lease_until`, seconds since the epoch) runs."""

    study_id: str
    tenant: str
    request_id: str
    state: int
    spec: bytes
    create_time: float
    update_time: float
    start_time: float = 0.0
    end_time: float = 0.0
    inputs: bytes = b""
    progress: bytes = b""
    error_code: int = 0
    error_message: str = ""
    cancel_requested: bool = False
    report: bytes = b""
    # The CreateStudy call's trace context (a W3C traceparent; "" without tracing): the
    # driver's rounds and the study's jobs continue that trace, on any replica.
    trace_context: str = ""


@dataclass(frozen=True)
class StudyQueryRow:
    """One query of a started study: its pool (opaque bytes, read on its own with
    `read_study_pool`), the budget and deadline its job gets (`assignment`, fixed before the
    job is created, so that a retry creates the same job), the job, and its outcome once the
    job has ended."""

    query_id: str
    position: int
    pool_size: int
    job_id: str = ""
    assignment: bytes = b""
    outcome: bytes = b""
    # A query judged again after the study was extended: what its previous job ended with
    # (StudyQuery bytes), whose verdicts the next job starts from; empty otherwise.
    carried: bytes = b""


class ChunkAdded(enum.Enum):
    ADDED = "added"
    SEEN = "seen"  # the study has a chunk with this request_id
    # The study takes no inputs now: it is running, or was cancelled before it started.
    CLOSED = "closed"
    REFUSED = "refused"  # the count refused the chunk (returned None)
    NO_STUDY = "no_study"  # the tenant has no such study


@dataclass(frozen=True)
class StudyChunk:
    """One AddStudyInputs chunk: its inputs, opaque bytes."""

    request_id: str
    payload: bytes


@dataclass(frozen=True)
class UsageReport:
    today: dict[str, Spend]  # by judge
    total: dict[str, Spend]  # by judge, every day
    reserved: Spend  # today's reservations not yet settled
    unfinished_jobs: int


class DuplicateRequest(Exception):
    """A job with this (tenant, request_id) exists already."""

    def __init__(self, existing: JobRecord) -> None:
        super().__init__(existing.job_id)
        self.existing = existing


class Replicated(Protocol):
    """Whether other server processes write to this database too (replicas): then what they
    commit reaches this one only through `LeaseStore.changes()`, which can miss a wake-up."""

    shared: bool = False


class JobReader(Protocol):
    """What a tenant reads of its own jobs: another tenant's job reads as no job at all."""

    @abc.abstractmethod
    async def get_job(self, tenant: str, job_id: str) -> JobRecord | None:
        """The job, if it exists and belongs to `tenant`."""

    @abc.abstractmethod
    async def list_jobs(
        self, tenant: str, state: int | None, page_size: int, before_job_id: str | None
    ) -> list[JobRecord]:
        """Newest first; `before_job_id` continues a previous page."""

    @abc.abstractmethod
    async def read_events(
        self, tenant: str, job_id: str, after_sequence: int, limit: int, max_bytes: int
    ) -> list[EventRow]:
        """Up to `limit` events after `after_sequence`, in order, stopping before the event whose
        payload would take the page past `max_bytes` (the first one always comes)."""

    @abc.abstractmethod
    async def latest_event(
        self, tenant: str, job_id: str, kinds: Sequence[str]
    ) -> EventRow | None: ...

    @abc.abstractmethod
    async def read_audit(self, tenant: str, job_id: str, call_id: str) -> VerdictAudit | None: ...


class JobStore(JobReader, Protocol):
    """Jobs as the replica that runs them creates, commits and rebuilds them."""

    @abc.abstractmethod
    async def create_job(
        self,
        job: JobRecord,
        first_event: EventRow,
        limits: Limits = Limits(),
        journal: Sequence[JournalRow] = (),
    ) -> JobRecord:
        """Insert a job, its first event and the `journal` it starts with. Raises
        DuplicateRequest for a reused request_id (checked first), then QuotaExceeded when the
        job's tenant already has `max_concurrent_jobs` unfinished jobs or created
        `jobs_per_minute` jobs in the last 60 seconds (retry_after_s: when the oldest of those
        leaves the window). The checks and the inserts are one transaction, so concurrent
        creates never overshoot."""

    @abc.abstractmethod
    async def unfinished_jobs(self) -> list[JobRecord]: ...

    @abc.abstractmethod
    async def commit(self, job_id: str, update: JobUpdate, fence: Lease | None = None) -> None:
        """Append events and journal rows and change the job's state, in one transaction.

        With `fence`, only while that lease is the job's current one: otherwise nothing is
        written and LeaseLost is raised."""

    @abc.abstractmethod
    async def read_journal(self, job_id: str) -> list[JournalRow]: ...

    @abc.abstractmethod
    async def read_verdicts(self, job_id: str, call_ids: Sequence[str]) -> dict[str, bytes]:
        """The stored verdicts of these calls (those that have one), by call id."""


class LeaseStore(Replicated, Protocol):
    """Which replica runs which job: membership, leases, cancellation requests and the
    wake-ups other replicas send."""

    @abc.abstractmethod
    async def heartbeat(self, replica: str, ttl_s: float, draining: bool = False) -> Membership:
        """Record `replica` as alive for `ttl_s` more seconds; returns the membership, in which
        a draining replica (shutting down, handing its jobs back) takes no share of the jobs.

        It also settles the open reservations of replicas that are not alive any more (every
        reservation a previous server left, where one process owns the database) at their
        reserved spend: their calls may have been paid for."""

    @abc.abstractmethod
    async def leave(self, replica: str) -> None:
        """Remove `replica` from the membership at once (the end of a clean shutdown)."""

    @abc.abstractmethod
    async def claim_jobs(self, owner: str, lease_s: float, limit: int) -> list[Claim]:
        """Lease up to `limit` unfinished jobs that no replica holds (never leased, handed
        back, or whose lease expired), oldest first, to `owner` for `lease_s` seconds; each
        claim raises the job's epoch. Replicas claiming at once never claim one job twice."""

    @abc.abstractmethod
    async def claim_job(self, job_id: str, owner: str, lease_s: float) -> Claim | None:
        """Lease this job to `owner`, if it is unfinished and no replica holds it."""

    @abc.abstractmethod
    async def renew_leases(self, leases: Sequence[Lease], lease_s: float) -> dict[str, bool]:
        """Extend the leases that are still current by `lease_s` seconds from now. Returns
        those still held (a lease missing was lost to another replica; a finished job's lease
        stays held until released), each with whether a client asked to cancel its job."""

    @abc.abstractmethod
    async def release_lease(self, lease: Lease) -> None:
        """Hand a job back (if the lease is still current), so that another replica can claim
        it at once rather than after the lease expires."""

    @abc.abstractmethod
    async def request_cancel(self, tenant: str, job_id: str) -> bool:
        """Mark the tenant's unfinished job as to be cancelled, for whichever replica runs it
        or claims it next; False when there is no such unfinished job."""

    async def changes(self) -> AsyncIterator[Change]:
        """What other replicas did, as it happens: a wake-up only, never the data (a missed
        change must cost at most a poll interval). Storage that one process owns has none."""
        await anyio.sleep_forever()
        yield Change("", "", 0)  # pragma: no cover - never reached


class WatcherStore(Protocol):
    """Open watch streams, counted per tenant across replicas (max_watchers)."""

    @abc.abstractmethod
    async def hold_watcher(self, watch_id: str, replica: str, tenant: str, limit: int) -> None:
        """Count one more open watch stream of `tenant`, on `replica`. Raises QuotaExceeded
        (max_watchers), holding nothing, when the tenant already has `limit` open on live
        replicas; check and hold are one transaction. A dead replica's streams stop counting
        once its heartbeat lapses."""

    @abc.abstractmethod
    async def release_watcher(self, watch_id: str) -> None: ...


class TenantStore(Protocol):
    """Tenants: their limits, and their encrypted provider credentials."""

    @abc.abstractmethod
    async def put_tenant(
        self,
        tenant: str,
        set_limits: Limits,
        clear_limits: Sequence[str],
        allow_server_provider_keys: bool | None,
        now: float,
    ) -> TenantRecord:
        """Create the tenant (DEFAULT_LIMITS, server keys allowed) if new; then set the limits that
        are not None in `set_limits`, remove those named in `clear_limits`, and set
        allow_server_provider_keys unless it is None."""

    @abc.abstractmethod
    async def get_tenant(self, tenant: str) -> TenantRecord | None: ...

    @abc.abstractmethod
    async def list_tenants(self) -> list[TenantRecord]: ...

    @abc.abstractmethod
    async def set_provider_key(
        self, tenant: str, provider: str, sealed: bytes | None
    ) -> TenantRecord | None:
        """Store (or, with None, remove) a tenant's encrypted provider credentials; None when
        the tenant does not exist."""

    @abc.abstractmethod
    async def provider_key(self, tenant: str, provider: str) -> bytes | None:
        """The tenant's encrypted credentials for a provider."""


class KeyStore(Protocol):
    """API keys: stored as the hash of their secret, never the secret."""

    @abc.abstractmethod
    async def create_key(self, key: KeyRecord) -> None:
        """Store a key, creating its tenant (no limits) if new."""

    @abc.abstractmethod
    async def get_key(self, key_id: str) -> KeyRecord | None: ...

    @abc.abstractmethod
    async def key_for_subject(self, certificate_subject: str) -> KeyRecord | None:
        """The unrevoked key mapped to this client-certificate subject, if any."""

    @abc.abstractmethod
    async def list_keys(self, tenant: str | None, include_revoked: bool) -> list[KeyRecord]:
        """Oldest first; every tenant's when `tenant` is None."""

    @abc.abstractmethod
    async def revoke_key(self, key_id: str, now: float) -> KeyRecord | None:
        """Mark the key revoked (once; a second revoke keeps the first time)."""


class SpendStore(Protocol):
    """What judge calls spend, held against each tenant's daily limits."""

    @abc.abstractmethod
    async def reserve_spend(self, reservation: Reservation) -> None:
        """Hold a call's worst-case spend. Raises QuotaExceeded, holding nothing, when today's
        settled spend plus today's open reservations plus this one would pass one of the
        tenant's daily limits (daily_judge_calls, daily_input_tokens, daily_cost_usd); check
        and hold are one transaction, so concurrent calls never overshoot."""

    @abc.abstractmethod
    async def settle_spend(self, reservation_id: str, actual: Spend) -> None:
        """Release a reservation and add what the call really spent to the reservation's
        (tenant, day, judge) usage, in one transaction. Unknown ids are ignored."""

    @abc.abstractmethod
    async def usage(self, tenant: str, day: str) -> UsageReport: ...


class QualificationStore(Protocol):
    """Judge qualifications against human labels, per tenant."""

    @abc.abstractmethod
    async def put_qualification(self, record: QualificationRecord) -> None: ...

    @abc.abstractmethod
    async def list_qualifications(
        self, tenant: str, judge_identity: str | None, limit: int
    ) -> list[QualificationRecord]:
        """The tenant's qualifications (of one judge identity, or all), newest first."""

    @abc.abstractmethod
    async def delete_qualification(
        self, tenant: str, qualification_id: str
    ) -> QualificationRecord | None:
        """Delete one of the tenant's qualifications; the deleted record, or None when the
        tenant has none by that id."""


class VerdictCache(Protocol):
    """Verdicts by the key of the call that gave them, so that the same call is never paid
    for twice (a job's verdicts also come in its commits: JobUpdate.cache)."""

    @abc.abstractmethod
    async def cache_get(self, key: str) -> bytes | None: ...

    @abc.abstractmethod
    async def cache_put(self, entries: Sequence[CacheEntry]) -> None:
        """Store verdicts that belong to no job (pointwise grades), in one transaction."""


class OperationStore(Protocol):
    """Long-running requests (QualifyJudge, FillQrels): their state, progress and result."""

    @abc.abstractmethod
    async def create_operation(self, record: OperationRecord) -> OperationRecord:
        """Insert an operation; when the tenant has one with the same non-empty request_id,
        insert nothing and return that one instead (check and insert are one transaction)."""

    @abc.abstractmethod
    async def get_operation(self, tenant: str, operation_id: str) -> OperationRecord | None:
        """The operation, if it exists and belongs to `tenant`."""

    @abc.abstractmethod
    async def list_operations(
        self, tenant: str, page_size: int, before_operation_id: str | None
    ) -> list[OperationRecord]:
        """Newest first, without their results; `before_operation_id` continues a page."""

    @abc.abstractmethod
    async def update_operation(self, operation_id: str, owner: str, progress: bytes) -> bool:
        """Record the progress of an unfinished operation that `owner` runs; returns whether a
        client asked to cancel it."""

    @abc.abstractmethod
    async def finish_operation(
        self,
        operation_id: str,
        owner: str,
        state: int,
        progress: bytes,
        result: bytes = b"",
        error_code: int = 0,
        error_message: str = "",
    ) -> None:
        """End an unfinished operation that `owner` runs (a finished one is left as it is)."""

    @abc.abstractmethod
    async def request_operation_cancel(self, tenant: str, operation_id: str) -> bool:
        """Mark the tenant's unfinished operation as to be cancelled, for the replica that runs
        it; False when there is no such unfinished operation."""

    @abc.abstractmethod
    async def end_orphaned_operations(
        self, replica: str, state: int, error_code: int, error_message: str
    ) -> int:
        """End in `state`, with this error, every unfinished operation whose owner is neither
        `replica` nor a live replica (its server stopped before it finished); returns how
        many. Where one process owns the database, that is every other owner's."""


class StudyStore(Protocol):
    """Studies: their inputs (chunks), their queries (one job each) and their state."""

    @abc.abstractmethod
    async def create_study(self, record: StudyRecord) -> StudyRecord:
        """Insert a study; when the tenant has one with the same non-empty request_id, insert
        nothing and return that one instead."""

    @abc.abstractmethod
    async def get_study(self, tenant: str, study_id: str) -> StudyRecord | None:
        """The study, if it exists and belongs to `tenant`, without its report."""

    @abc.abstractmethod
    async def study_report(self, tenant: str, study_id: str) -> bytes:
        """The final report stored with the tenant's study (empty until it has ended)."""

    @abc.abstractmethod
    async def list_studies(
        self, tenant: str, page_size: int, before_study_id: str | None
    ) -> list[StudyRecord]:
        """Newest first, without their reports."""

    @abc.abstractmethod
    async def add_study_chunk(
        self,
        tenant: str,
        study_id: str,
        chunk: StudyChunk,
        count: Callable[[bytes], bytes | None],
    ) -> ChunkAdded:
        """Add a chunk to the tenant's study (a draft, or one that ran and has ended: it takes
        runs to add), and set the study's input counts to `count(its counts so far)`, in one
        transaction (chunks added at once are counted one after the other); a count of None
        refuses the chunk. A chunk whose request_id the study has is SEEN before anything else
        is checked; anything but ADDED adds nothing."""

    @abc.abstractmethod
    async def read_study_chunks(
        self, study_id: str, skip: int = 0, limit: int | None = None
    ) -> list[bytes]:
        """The chunks' payloads in the order they were added: all, or `limit` of them after
        the first `skip`."""

    @abc.abstractmethod
    async def start_study(
        self,
        study_id: str,
        queries: Iterable[tuple[StudyQueryRow, bytes]],
        progress: bytes,
        record_round: Callable[[bytes], bytes],
    ) -> bool:
        """Turn the draft study into a running one with its queries (each with its pool), its
        input counts set to `record_round(its counts)`, in one transaction; False when it was
        not a draft any more, or its cancel was asked for (so that a cancel and a start never
        both win)."""

    @abc.abstractmethod
    async def extend_study(
        self,
        study_id: str,
        spec: bytes,
        queries: Iterable[tuple[StudyQueryRow, bytes]],
        progress: bytes,
        record_round: Callable[[bytes], bytes],
    ) -> bool:
        """Run the ended study again with `spec` (its budget and deadline as extended) and its
        input counts set to `record_round(its counts)`: each of `queries` (a row with its new
        pool) replaces the query of that id (its job, assignment and outcome cleared, `carried`
        set) or is added. One transaction; False when the study had not ended (it is running
        again already, or is a draft)."""

    @abc.abstractmethod
    async def study_queries(
        self, study_id: str, after_position: int, limit: int, *, unfinished: bool = False
    ) -> list[StudyQueryRow]:
        """The study's queries in topic order from `after_position` on (exclusive), at most
        `limit`; with `unfinished`, only those whose job has no outcome yet."""

    @abc.abstractmethod
    async def read_study_pool(self, study_id: str, query_id: str) -> bytes:
        """The query's pool as stored by start_study."""

    @abc.abstractmethod
    async def assign_study_query(self, study_id: str, query_id: str, assignment: bytes) -> None:
        """Fix the budget and deadline the query's job gets, before the job is created."""

    @abc.abstractmethod
    async def set_study_query_job(self, study_id: str, query_id: str, job_id: str) -> None:
        """Record the query's job."""

    @abc.abstractmethod
    async def finish_study_query(
        self, study_id: str, query_id: str, outcome: bytes, progress: bytes
    ) -> None:
        """Record the outcome of the query's job and the study's progress, together."""

    @abc.abstractmethod
    async def reopen_study_queries(
        self, study_id: str, query_ids: Sequence[str], progress: bytes
    ) -> None:
        """Judge these ended queries of the running study on: each one's outcome becomes its
        `carried` (the job its next job continues) and its job, assignment and outcome are
        cleared; with the study's progress, in one transaction."""

    @abc.abstractmethod
    async def update_study_progress(self, study_id: str, progress: bytes) -> None:
        """Record the running study's progress."""

    @abc.abstractmethod
    async def claim_studies(self, owner: str, lease_s: float, limit: int) -> list[StudyRecord]:
        """Running studies this replica may drive now: those whose lease has run out or is
        already `owner`'s, leased to `owner` for `lease_s` seconds (their leases renewed)."""

    @abc.abstractmethod
    async def claim_study(self, study_id: str, owner: str, lease_s: float) -> StudyRecord | None:
        """The study, leased (or its lease renewed) to `owner` for `lease_s` seconds, if it is
        running and its lease has run out or is `owner`'s already; else None. What a driver
        renews its lease with, and what a replica that drives only the studies it is asked to
        claims them with (claim_studies would take every study it may)."""

    @abc.abstractmethod
    async def request_study_cancel(self, tenant: str, study_id: str) -> bool:
        """Mark the tenant's draft or running study as to be cancelled; False when there is no
        such unfinished study."""

    @abc.abstractmethod
    async def finish_study(
        self,
        study_id: str,
        state: int,
        progress: bytes,
        report: bytes,
        error_code: int = 0,
        error_message: str = "",
    ) -> bool:
        """End an unfinished study with its final progress and report; False when it had
        ended already."""

    @abc.abstractmethod
    async def replace_study_report(self, tenant: str, study_id: str, report: bytes) -> bool:
        """Store a new final report for the tenant's ended study (its labels calibrated
        afresh, nothing judged again); False when the study is not one that has ended."""


class BatchState(enum.StrEnum):
    """Where a provider batch is, as its journal says."""

    # Its calls are written; the vendor may or may not have it (no vendor id yet).
    SUBMITTING = "submitting"
    # The vendor has it (vendor id known) and has not ended it.
    OPEN = "open"
    # The vendor ended it: its results can be read (answers, failures, expired, cancelled).
    ENDED = "ended"
    # No call of it will be answered: the vendor refused or failed it whole, or never got it.
    FAILED = "failed"


UNENDED_BATCH_STATES = (BatchState.SUBMITTING, BatchState.OPEN)


@dataclass(frozen=True)
class ProviderBatchRecord:
    """One provider batch, journaled before it is submitted (see ProviderBatchJournal)."""

    batch_id: str  # ours: the label the vendor's batch carries where the vendor takes one
    tenant: str
    # Whose calls it carries: "studies/{id}" for a study's jobs, else "jobs/{id}".
    owner: str
    provider: str
    model: str
    calls: int
    create_time: float
    state: BatchState = BatchState.SUBMITTING
    vendor_id: str = ""
    vendor_status: str = ""
    # The vendor's own request counts, as JSON ({} until first polled).
    counts: str = "{}"
    message: str = ""
    submit_time: float = 0.0
    update_time: float = 0.0
    end_time: float = 0.0


@dataclass(frozen=True)
class ProviderBatchCall:
    """A job's call carried by a provider batch, under the custom id it has there."""

    batch_id: str
    custom_id: str
    job_id: str
    call_id: str


class ProviderBatchJournal(Protocol):
    """Provider batches and the calls they carry, written before the vendor is asked, so that
    a restart, kill -9 or another replica taking a job over finds a call's open batch and waits
    for it instead of submitting (and paying for) the call again."""

    @abc.abstractmethod
    async def journal_batch(
        self, record: ProviderBatchRecord, calls: Sequence[ProviderBatchCall]
    ) -> None:
        """Insert a batch about to be submitted (SUBMITTING) with its calls, in one write."""

    @abc.abstractmethod
    async def batch_submitted(self, batch_id: str, vendor_id: str) -> bool:
        """Record the vendor's id of a SUBMITTING batch (now OPEN); False when it was not
        SUBMITTING any more (another process recorded it, or failed it, first)."""

    @abc.abstractmethod
    async def batch_not_submitted(self, batch_id: str, message: str) -> bool:
        """Record that a SUBMITTING batch never reached the vendor (now FAILED, its calls to be
        asked anew); False when it was not SUBMITTING any more (its vendor id was recorded)."""

    @abc.abstractmethod
    async def batch_status(
        self,
        batch_id: str,
        state: BatchState,
        vendor_status: str,
        counts: str,
        message: str = "",
    ) -> None:
        """Record what the vendor says of a batch; ENDED and FAILED are final (a batch that
        has ended keeps that state whatever a later write says)."""

    @abc.abstractmethod
    async def get_provider_batch(self, batch_id: str) -> ProviderBatchRecord | None: ...

    @abc.abstractmethod
    async def batch_of_call(
        self, job_id: str, call_id: str
    ) -> tuple[ProviderBatchRecord, str] | None:
        """The newest batch that carries the job's call, with the call's custom id there."""

    @abc.abstractmethod
    async def take_batch_poll(self, batch_id: str, poller: str, lease_s: float) -> bool:
        """Let `poller` poll the batch for `lease_s` seconds, unless another poller's lease on
        it is still running: one replica asks the vendor, the others read what it recorded."""

    @abc.abstractmethod
    async def withdraw_batch_calls(self, job_id: str) -> list[ProviderBatchRecord]:
        """Mark every call of the job in unended batches as no longer wanted (the job has
        ended); returns those unended batches none of whose calls is wanted any more."""

    @abc.abstractmethod
    async def owner_batches(
        self, tenant: str, owner: str, unended_only: bool = False
    ) -> list[ProviderBatchRecord]:
        """The tenant's batches for `owner`, oldest first."""


class Database(Protocol):
    """The database as a whole: whether it answers, and its end."""

    @abc.abstractmethod
    async def ping(self) -> None:
        """Raise StorageError unless the database answers now."""

    @abc.abstractmethod
    def announce(self, address: str) -> None:
        """Say where this server serves, for a second server the database refuses to name it."""

    @abc.abstractmethod
    async def unfinished_counts(self) -> UnfinishedCounts:
        """How many jobs and studies of the whole database have not ended, by tenant and
        state (what the metrics show); read through partial indexes that hold only those."""

    @abc.abstractmethod
    async def close(self) -> None: ...


class Storage(
    JobStore,
    LeaseStore,
    WatcherStore,
    TenantStore,
    KeyStore,
    SpendStore,
    QualificationStore,
    VerdictCache,
    OperationStore,
    StudyStore,
    ProviderBatchJournal,
    Database,
):
    """Every role: what a backend implements (SqliteStorage, PostgresStorage) and what the
    server opens. A consumer takes the roles it uses (a constructor's parameter typed
    JobStore, say, or a small protocol naming several), so that the type checker proves it
    uses nothing else."""
