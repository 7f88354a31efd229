"""Durable state: jobs and their events, leases, tenants and keys, spend, qualifications,
operations, studies, provider batches and the verdict cache, behind one interface, `Storage`,
made of the roles in `base.py` that each layer is typed against.

Two backends implement it, chosen by the `--db` location (`by_url.open_storage`): SQLite
(`storage/sqlite/`, the embedded default, one server) and PostgreSQL (`storage/postgres/`, one
or several replicas sharing jobs under leases), each a package with one module per role and a
`storage.py` that composes them. A new backend implements every role, reads and writes the
record types below, raises the server's errors (server/errors.py) and passes
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
