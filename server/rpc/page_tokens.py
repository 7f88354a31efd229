"""Page tokens (ListJobs, ListOperations, the study listings): opaque, signed, and tied to the
listing they continue (AIP-158).

A token names the last job of the page before and the state filter it was made for, signed
with an HMAC key that lives as long as the server process: a forged or altered token, or one
used with another filter, is INVALID_ARGUMENT, and a token from before a restart is too
(the client lists again from the start).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets

from tierank.server.errors import FieldViolation, InvalidInput

_KEY = secrets.token_bytes(32)
_MAC_BYTES = 16
# Far above any real token (a job id, a state number and a MAC), so decoding stays cheap.
_MAX_TOKEN_CHARS = 512


def encode(last_job_id: str, state: int) -> str:
    payload = f"{last_job_id}:{state}".encode()
    return base64.urlsafe_b64encode(payload + _mac(payload)).decode().rstrip("=")


def decode(token: str, state: int) -> str | None:
    """The last job id of the previous page; None for the first page."""
    if not token:
        return None
    payload = _verified(token)
    if payload is None:
        raise InvalidInput(
            [FieldViolation("page_token", "is not a page token this server made for this listing")]
        )
    token_job, _, token_state = payload.rpartition(":")
    if token_state != str(state):
        raise InvalidInput(
            [FieldViolation("page_token", "was made for another state filter; list again")]
        )
    return token_job


def _verified(token: str) -> str | None:
    if len(token) > _MAX_TOKEN_CHARS:
        return None
    try:
        raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
    except ValueError:  # binascii.Error is one
        return None
    payload, mac = raw[:-_MAC_BYTES], raw[-_MAC_BYTES:]
    if len(raw) <= _MAC_BYTES or not hmac.compare_digest(mac, _mac(payload)):
        return None
    # Only encode() makes a valid MAC, so the payload is its "job_id:state", as it wrote it.
    return payload.decode()


def _mac(payload: bytes) -> bytes:
    return hmac.new(_KEY, payload, hashlib.sha256).digest()[:_MAC_BYTES]
