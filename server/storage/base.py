"""The storage interface. SQLite is the embedded default; PostgreSQL can implement the same.

Storage is proto-agnostic: specs and events are opaque bytes, so a backend never needs to know
the wire types. Every method that writes is one transaction: it is durable when it returns.
"""

from __future__ import annotations

import abc
from collections.abc import Sequence
from dataclasses import dataclass


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


class StorageError(Exception):
    """A storage failure explained in plain words, never a driver's class name, so the RPC layer
    can tell a client what happened."""


class StorageFull(StorageError):
    """The disk holding the database is full: writes fail until space is freed; reads work."""


class StorageDamaged(StorageError):
    """Stored data cannot be read back (a damaged page, an undecodable row)."""


class DuplicateRequest(Exception):
    """A job with this (tenant, request_id) exists already."""

    def __init__(self, existing: JobRecord) -> None:
        super().__init__(existing.job_id)
        self.existing = existing


class Storage(abc.ABC):
    @abc.abstractmethod
    async def create_job(self, job: JobRecord, first_event: EventRow) -> JobRecord:
        """Insert a job and its first event. Raises DuplicateRequest for a reused request_id."""

    @abc.abstractmethod
    async def get_job(self, job_id: str) -> JobRecord | None: ...

    @abc.abstractmethod
    async def list_jobs(
        self, tenant: str, state: int | None, page_size: int, before_job_id: str | None
    ) -> list[JobRecord]:
        """Newest first; `before_job_id` continues a previous page."""

    @abc.abstractmethod
    async def unfinished_jobs(self) -> list[JobRecord]: ...

    @abc.abstractmethod
    async def commit(self, job_id: str, update: JobUpdate) -> None:
        """Append events and journal rows and change the job's state, in one transaction."""

    @abc.abstractmethod
    async def read_events(
        self, job_id: str, after_sequence: int, limit: int, max_bytes: int
    ) -> list[EventRow]:
        """Up to `limit` events after `after_sequence`, in order, stopping before the event whose
        payload would take the page past `max_bytes` (the first one always comes)."""

    @abc.abstractmethod
    async def latest_event(self, job_id: str, kinds: Sequence[str]) -> EventRow | None: ...

    @abc.abstractmethod
    async def read_journal(self, job_id: str) -> list[JournalRow]: ...

    @abc.abstractmethod
    async def cache_get(self, key: str) -> bytes | None: ...

    @abc.abstractmethod
    async def cache_put(self, entries: Sequence[CacheEntry]) -> None:
        """Store verdicts that belong to no job (pointwise grades), in one transaction."""

    @abc.abstractmethod
    async def read_audit(self, job_id: str, call_id: str) -> VerdictAudit | None: ...

    @abc.abstractmethod
    async def read_verdicts(self, job_id: str, call_ids: Sequence[str]) -> dict[str, bytes]:
        """The stored verdicts of these calls (those that have one), by call id."""

    @abc.abstractmethod
    async def close(self) -> None: ...
