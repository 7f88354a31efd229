"""The errors every layer raises, as one tree; the API edge (server/rpc/statuses.py) alone turns
them into google.rpc statuses with details, so clients in every language get structured causes.

    TierankError
    ├── InvalidInput          a request breaks rules, each named by field (FieldViolation)
    │   └── OutOfRange        a value past the end of what exists (a page past the last)
    ├── NotFound              a resource (name and type) that does not exist, or is not yours
    ├── Unavailable           not now, try again after retry_after_s
    ├── QuotaExceeded         a tenant's limit (name, value) reached; maybe when to retry
    ├── ResourceExhausted     a server-wide bound reached (reason, what it is)
    ├── PreconditionFailed    the request is fine, the state it needs is not (reason)
    ├── PermissionDenied      the caller may not do this (reason)
    ├── Unauthenticated       no caller, or a credential that is not valid (reason)
    ├── RecordedFailure       a failure stored earlier with its code, reported again as it was
    └── StorageError          the database failed, in plain words (never a driver's class name)
        ├── StorageUnavailable
        ├── StorageFull
        ├── StorageDamaged
        └── LeaseLost

A kind carries what its status needs and nothing about the wire. Its text (str) is what a
client reads, except where the edge knows more: a quota's tenant is the caller's, and a storage
failure's text is the operator's reason, which the edge puts in words for a client.

This module is a leaf (tests/test_layers.py): storage, at the bottom, raises these too.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

# Error texts a job keeps (a verdict's failure reason, a judge's last error, a job's error):
# kept short so that what a job can grow to stays bounded (see validation).
MAX_ERROR_TEXT_BYTES = 1024

# Status details travel in one HTTP/2 trailer; clients drop trailers over 8-16 KiB and then
# see "Stream removed" instead of the error. These caps keep a whole status under ~5 KiB, however
# many rules a request breaks and however long the values it echoes.
MAX_VIOLATIONS = 20
_VIOLATIONS_BUDGET_BYTES = 2500
_FIELD_BYTES = 120
_RULE_BYTES = 200
_MESSAGE_BYTES = 400
_SHOWN_CHARS = 80


def clip(text: str, limit_bytes: int) -> str:
    """`text` cut to at most `limit_bytes` of UTF-8 (on a character boundary), marked '…'."""
    encoded = text.encode()
    if len(encoded) <= limit_bytes:
        return text
    return encoded[: limit_bytes - 3].decode(errors="ignore") + "…"


def shown(value: object) -> str:
    """A client's value quoted for an error message, cut so a huge value cannot bloat it."""
    text = repr(value)
    return text if len(text) <= _SHOWN_CHARS else text[: _SHOWN_CHARS - 1] + "…"


@dataclass(frozen=True)
class FieldViolation:
    field: str
    rule: str


# NUL has no place in a client's text: PostgreSQL's TEXT cannot hold it, and code that reads
# C strings (model servers, tokenizers) cuts a prompt at it. Every text field refuses it so.
NUL = "\x00"
NUL_RULE = "must not contain NUL characters"


def metadata_nul_violations(field: str, metadata: Mapping[str, str]) -> list[FieldViolation]:
    """NUL in a metadata map: in a key (named by `field`) or a value (`field[key]`)."""
    violations = []
    for key, value in metadata.items():
        if NUL in key:
            violations.append(FieldViolation(field, f"keys {NUL_RULE}"))
        elif NUL in value:
            violations.append(FieldViolation(f"{field}[{shown(key)}]", NUL_RULE))
    return violations


class TierankError(Exception):
    """The root: every failure the server explains to its client."""


class InvalidInput(TierankError):
    """The request breaks one or more rules. `shown` is what a client is told: at most
    MAX_VIOLATIONS of them within a byte budget, each clipped, and a last entry counting the
    rest."""

    headline = "invalid request"

    def __init__(self, violations: Sequence[FieldViolation]) -> None:
        self.violations = tuple(violations)
        self.shown = _bounded(self.violations)
        summary = "; ".join(f"{v.field}: {v.rule}" for v in self.shown[:3])
        if len(self.violations) > 3:
            summary += f"; and {len(self.violations) - 3} more"
        super().__init__(clip(f"{self.headline}: {summary}", _MESSAGE_BYTES))


class OutOfRange(InvalidInput):
    """A value past the end of what exists, such as a page after the last."""

    headline = "out of range"

    def __init__(self, violation: FieldViolation) -> None:
        super().__init__([violation])


def _bounded(violations: Sequence[FieldViolation]) -> tuple[FieldViolation, ...]:
    bounded: list[FieldViolation] = []
    used = 0
    for violation in violations[:MAX_VIOLATIONS]:
        field = clip(violation.field, _FIELD_BYTES)
        rule = clip(violation.rule, _RULE_BYTES)
        used += len(field.encode()) + len(rule.encode())
        if used > _VIOLATIONS_BUDGET_BYTES:
            break
        bounded.append(FieldViolation(field, rule))
    left_out = len(violations) - len(bounded)
    if left_out:
        bounded.append(FieldViolation("", f"and {left_out} more violations not shown"))
    return tuple(bounded)


class NotFound(TierankError):
    """`resource` (a resource name, of `resource_type`) does not exist, or is not the caller's:
    the two are never told apart. `advice` says how to make it, where a client can."""

    def __init__(
        self, resource: str, resource_type: str = "tierank.v1.Job", advice: str = ""
    ) -> None:
        self.resource = clip(resource, _FIELD_BYTES)
        self.resource_type = resource_type
        super().__init__(f"{self.resource} not found" + (f"; {advice}" if advice else ""))


class Unavailable(TierankError):
    """Not now (the server is shutting down, a judge failed): the same call can succeed after
    `retry_after_s`."""

    def __init__(self, message: str, retry_after_s: float) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


class QuotaExceeded(TierankError):
    """Storing or doing this would take a tenant past one of its limits; nothing was stored.
    Raised inside storage's transactions (where the count is exact across replicas) and by
    tenancy; `retry_after_s` is set for a rate."""

    def __init__(self, limit: str, value: float, retry_after_s: float | None = None) -> None:
        super().__init__(f"{limit} ({value})")
        self.limit = limit
        self.value = value
        self.retry_after_s = retry_after_s


class _Explained(TierankError):
    """A failure with a message and a machine-readable `reason` (UPPER_SNAKE_CASE) that clients
    can switch on, and `metadata` (values as strings) where there is more to switch on."""

    def __init__(self, message: str, reason: str, **metadata: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.metadata = metadata


class ResourceExhausted(_Explained):
    """A bound of this server (not a tenant's quota) is reached; `metadata` says which and how
    much."""


class PreconditionFailed(_Explained):
    """The request is well formed, but the state it needs is not there (a judge not qualified,
    a stored key that cannot be opened, a study running another round); `metadata` may say
    which state."""


class PermissionDenied(_Explained):
    """The caller is known but may not do this."""


class Unauthenticated(_Explained):
    """The call carries no credential, or one that is not (or no longer) valid."""


class RecordedFailure(TierankError):
    """A failure stored earlier with its google.rpc `code` (how an operation ended), reported
    again exactly so: the code and the message, nothing more."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


class StorageError(TierankError):
    """A storage failure explained in plain words, never a driver's class name, so the server
    can tell a client (and an operator) what happened."""


class StorageUnavailable(StorageError):
    """The database cannot be reached now (refused, restarting, connection lost); nothing is
    wrong with the data, and the same call can succeed once it is back."""


class LeaseLost(StorageError):
    """The job's lease has passed to another replica (this one was paused or cut off past its
    expiry): nothing was written, and this replica must stop running the job."""


class StorageFull(StorageError):
    """The disk holding the database is full: writes fail until space is freed; reads work."""


class StorageDamaged(StorageError):
    """Stored data cannot be read back (a damaged page, an undecodable row)."""
