"""Who is calling: an API key (`authorization: Bearer`), a client certificate mapped to a key,
or, on a loopback server run with --auth none, the operator (in the default tenant).

A key's role is what it may do: a member runs and reads its tenant's jobs; an admin also manages
its own tenant's keys, limits, provider keys and usage; the operator manages every tenant.

The caller is resolved once per call by the interceptor and kept in a context variable, so a
servicer reads the tenant from the credential and never from the request.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextvars import ContextVar
from dataclasses import dataclass

import grpc

from tierank.server.errors import PermissionDenied, Unauthenticated
from tierank.server.names import key_name
from tierank.server.rpc import audit
from tierank.server.rpc.tls import peer_certificate_subject
from tierank.server.storage.base import KeyRecord, KeyStore
from tierank.server.tenancy.keys import (
    DEFAULT_TENANT,
    ROLE_ADMIN,
    ROLE_OPERATOR,
    secret_matches,
    split_token,
)

AUTH_NONE = "none"
AUTH_KEYS = "keys"
_AUTHORIZATION = "authorization"
_BEARER = "bearer "


@dataclass(frozen=True)
class Caller:
    tenant: str
    role: str
    # The key that authenticated the call; empty on a server without authentication.
    key_id: str = ""
    # Who acted when no key did (the audit log's "who").
    origin: str = "anonymous"

    @property
    def is_admin(self) -> bool:
        """An admin of its own tenant at least (the operator is one of every tenant)."""
        return self.role in (ROLE_ADMIN, ROLE_OPERATOR)

    @property
    def is_operator(self) -> bool:
        return self.role == ROLE_OPERATOR

    def sees_tenant(self, tenant: str) -> bool:
        """Whether `tenant` exists for this caller: any for the operator, else its own only."""
        return self.is_operator or tenant == self.tenant

    @property
    def who(self) -> str:
        return key_name(self.key_id) if self.key_id else self.origin

    @property
    def role_phrase(self) -> str:
        """ "an admin of tenant team-a", for messages that say why a call was refused."""
        article = "an" if self.role[0] in "aeiou" else "a"
        return f"{article} {self.role} of tenant {self.tenant}"


UNAUTHENTICATED_CALLER = Caller(DEFAULT_TENANT, ROLE_OPERATOR)
_CALLER: ContextVar[Caller] = ContextVar("tierank_caller")


def current_caller() -> Caller:
    """The caller of the RPC being served (set by the interceptor for every call)."""
    return _CALLER.get()


def set_caller(caller: Caller) -> None:
    _CALLER.set(caller)


def require_admin(caller: Caller, rpc: str) -> None:
    if not caller.is_admin:
        audit.denied(caller, rpc, "needs an admin key")
        raise PermissionDenied(
            f"{rpc} needs an admin key; {caller.who} is {caller.role_phrase}",
            "ADMIN_ONLY",
        )


def require_operator(caller: Caller, rpc: str, what: str) -> None:
    if not caller.is_operator:
        audit.denied(caller, rpc, f"{what} needs an operator key")
        raise PermissionDenied(
            f"{what} needs an operator key; {caller.who} is {caller.role_phrase}",
            "OPERATOR_ONLY",
        )


def key_revoked(key_id: str) -> Unauthenticated:
    return Unauthenticated(f"API key {key_name(key_id)} was revoked", "KEY_REVOKED")


class Authenticator:
    def __init__(self, storage: KeyStore, mode: str) -> None:
        self._storage = storage
        self._mode = mode

    async def caller(
        self,
        rpc: str,
        metadata: Sequence[tuple[str, str | bytes]],
        context: grpc.aio.ServicerContext,
    ) -> Caller:
        """The authenticated caller, or UNAUTHENTICATED; never says which part of a key was
        wrong, and never echoes the key."""
        if self._mode == AUTH_NONE:
            return UNAUTHENTICATED_CALLER
        headers = [value for name, value in metadata if name == _AUTHORIZATION]
        if len(headers) > 1:
            # Proxies and libraries disagree on which of several wins: taking any one of them
            # would let a header added on the way stand in for the client's own.
            audit.denied(None, rpc, "several authorization headers")
            raise Unauthenticated(
                f"the call carries {len(headers)} 'authorization' metadata entries; send exactly"
                " one ('authorization: Bearer <key>')",
                "DUPLICATE_CREDENTIALS",
            )
        if headers and headers[0]:
            # gRPC hands bytes only for '-bin' keys: str() is for the type checker.
            return await self._by_token(rpc, str(headers[0]))
        subject = peer_certificate_subject(context)
        if subject is not None:
            key = await self._storage.key_for_subject(subject)
            if key is not None:
                return _caller_of(key)
            audit.denied(None, rpc, "client certificate not mapped to a key")
            raise Unauthenticated(
                "the client certificate's subject is not mapped to any API key",
                "CERTIFICATE_NOT_MAPPED",
            )
        audit.denied(None, rpc, "no credentials")
        raise Unauthenticated(
            "this server needs an API key: send the metadata 'authorization: Bearer <key>' "
            "(tierank --api-key or TIERANK_API_KEY)",
            "MISSING_CREDENTIALS",
        )

    async def _by_token(self, rpc: str, header: str) -> Caller:
        token = header[len(_BEARER) :] if header[: len(_BEARER)].lower() == _BEARER else ""
        parts = split_token(token.strip())
        key = await self._storage.get_key(parts[0]) if parts else None
        if parts is None or key is None or not secret_matches(parts[1], key.secret_hash):
            audit.denied(None, rpc, "invalid API key")
            raise Unauthenticated("the API key is not valid", "INVALID_API_KEY")
        if key.revoke_time is not None:
            audit.denied(_caller_of(key), rpc, "revoked API key")
            raise key_revoked(key.key_id)
        return _caller_of(key)


def _caller_of(key: KeyRecord) -> Caller:
    return Caller(key.tenant, key.role, key.key_id)
