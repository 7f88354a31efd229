"""API keys: made here, shown once, stored only as a hash, checked in constant time.

A key reads `trk_{key_id}_{secret}`: the key id (public, 12 hex digits) finds the stored record
in one indexed read; the secret is 32 random bytes (256 bits). Secrets that random need no slow
password hash: SHA-256 of the secret cannot be reversed or guessed, and comparing the digests
with `hmac.compare_digest` takes the same time wherever they differ.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from dataclasses import dataclass

DEFAULT_TENANT = "default"
ROLE_MEMBER = "member"
ROLE_ADMIN = "admin"
# The server's own administrator: acts on every tenant (tenants, their keys, quotas, usage).
ROLE_OPERATOR = "operator"
_PREFIX = "trk"
_TOKEN = re.compile(rf"{_PREFIX}_([0-9a-f]{{12}})_([A-Za-z0-9_-]{{43}})")


@dataclass(frozen=True)
class NewKey:
    key_id: str
    token: str  # what the client sends; shown once
    secret_hash: bytes


def new_key() -> NewKey:
    key_id = secrets.token_hex(6)
    secret = secrets.token_urlsafe(32)
    return NewKey(key_id, f"{_PREFIX}_{key_id}_{secret}", hash_secret(secret))


def hash_secret(secret: str) -> bytes:
    return hashlib.sha256(secret.encode()).digest()


def split_token(token: str) -> tuple[str, str] | None:
    """(key id, secret) of a well-formed token, else None."""
    match = _TOKEN.fullmatch(token)
    return (match.group(1), match.group(2)) if match else None


def secret_matches(secret: str, stored_hash: bytes) -> bool:
    return hmac.compare_digest(hash_secret(secret), stored_hash)
