"""Which provider account a tenant's judges spend on: its own key where an admin set one, else
the server's, if the tenant is allowed to use the server's keys."""

from __future__ import annotations

from collections.abc import Iterable

from tierank.server.errors import FieldViolation, InvalidInput, PreconditionFailed
from tierank.server.judges.accounts import ProviderAccount
from tierank.server.judges.providers import PROVIDERS
from tierank.server.storage.base import TenantStore
from tierank.server.tenancy.sealing import Sealer, SealingError


class ProviderAccounts:
    def __init__(self, storage: TenantStore, sealer: Sealer) -> None:
        self._storage = storage
        self._sealer = sealer

    async def resolve(
        self, tenant: str, judges: Iterable[tuple[str, str]]
    ) -> dict[str, ProviderAccount]:
        """For (field, provider) pairs: the tenant's own account per provider it has a key for.
        INVALID_ARGUMENT names each judge whose provider the tenant may not use;
        FAILED_PRECONDITION says a stored key cannot be opened (the server's key changed)."""
        record = await self._storage.get_tenant(tenant)
        own = set(record.provider_keys) if record is not None else set()
        allowed = record is None or record.allow_server_provider_keys
        accounts: dict[str, ProviderAccount] = {}
        violations: list[FieldViolation] = []
        for field, provider in judges:
            if provider not in PROVIDERS or provider in accounts:
                continue
            if provider in own:
                sealed = await self._storage.provider_key(tenant, provider)
                if sealed is not None:
                    accounts[provider] = ProviderAccount(tenant, self._open(sealed))
                    continue
            if not allowed:
                violations.append(
                    FieldViolation(
                        field,
                        f"tenant {tenant} has no {provider} key of its own and may not use "
                        "the server's (an admin can set one with `tierank tenants provider-key`)",
                    )
                )
        if violations:
            raise InvalidInput(violations)
        return accounts

    def _open(self, sealed: bytes) -> str:
        try:
            return self._sealer.open(sealed)
        except SealingError as error:
            raise PreconditionFailed(str(error), "PROVIDER_KEY_UNREADABLE") from None
