"""Durable state: jobs and their events, leases, tenants and keys, spend, qualifications,
operations and the verdict cache, behind one interface, `Storage`.

Two backends implement it, chosen by the `--db` location (`open_storage`): SQLite
(`storage/sqlite.py`, the embedded default, one server) and PostgreSQL (`storage/postgres.py`,
one or several replicas sharing jobs under leases). A new backend subclasses `Storage`, reads
and writes the record types below, raises the server's errors (server/errors.py) and passes
tests/storage/test_contract.py. Storage is proto-agnostic: specs and events are opaque bytes.
"""

from tierank.server.storage.base import (
    DEFAULT_LIMITS,
    LIMIT_NAMES,
    CacheEntry,
    Change,
    Claim,
    DuplicateRequest,
    EventRow,
    JobRecord,
    JobUpdate,
    JournalRow,
    KeyRecord,
    Lease,
    Limits,
    Membership,
    OperationRecord,
    QualificationRecord,
    Reservation,
    Settlement,
    Spend,
    Storage,
    TenantRecord,
    UsageReport,
    VerdictAudit,
)
from tierank.server.storage.by_url import PoolSettings, open_storage

__all__ = [
    "DEFAULT_LIMITS",
    "LIMIT_NAMES",
    "CacheEntry",
    "Change",
    "Claim",
    "DuplicateRequest",
    "EventRow",
    "JobRecord",
    "JobUpdate",
    "JournalRow",
    "KeyRecord",
    "Lease",
    "Limits",
    "Membership",
    "OperationRecord",
    "PoolSettings",
    "QualificationRecord",
    "Reservation",
    "Settlement",
    "Spend",
    "Storage",
    "TenantRecord",
    "UsageReport",
    "VerdictAudit",
    "open_storage",
]
