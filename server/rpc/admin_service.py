"""AdminService: tenants, API keys, quotas, provider keys and usage.

Every method needs an admin caller except GetUsage, which a member may call for its own tenant.
An admin acts on its own tenant only: to it, another tenant is NOT_FOUND exactly like one that
does not exist. The operator acts on every tenant, and alone creates tenants, lists them all and
makes operator keys. Every change is one audit line (server/rpc/audit.py). No response carries a
key's secret, other than CreateApiKey's own, or any provider key.
"""

from __future__ import annotations

import time
from typing import Protocol

import grpc

from tierank.limits import MAX_DISPLAY_NAME_BYTES, MAX_PROVIDER_KEY_BYTES, MAX_SUBJECT_BYTES
from tierank.server.errors import (
    NUL,
    NUL_RULE,
    FieldViolation,
    InvalidInput,
    NotFound,
    PreconditionFailed,
)
from tierank.server.judges.providers import PROVIDERS
from tierank.server.names import (
    TENANT_RULE,
    BadName,
    is_valid_tenant,
    key_name,
    parse_key_name,
    tenant_name,
)
from tierank.server.rpc import audit
from tierank.server.rpc.auth import Caller, current_caller, require_admin, require_operator
from tierank.server.storage.base import (
    LIMIT_NAMES,
    KeyRecord,
    KeyStore,
    Limits,
    SpendStore,
    TenantStore,
)
from tierank.server.tenancy.keys import ROLE_OPERATOR, new_key
from tierank.server.tenancy.sealing import Sealer, SealingError
from tierank.server.tenancy.spending import utc_day
from tierank.server.wire.admin import (
    ROLES,
    key_view,
    limits_from_quota,
    quota_view,
    spend_view,
    tenant_view,
)
from tierank.v1 import admin_pb2, admin_pb2_grpc

ADMIN_SERVICE = admin_pb2.DESCRIPTOR.services_by_name["AdminService"].full_name
_KEY_TYPE = "tierank.v1.ApiKey"
_TENANT_TYPE = "tierank.v1.Tenant"


def _check_tenant(field: str, tenant: str) -> list[FieldViolation]:
    return [] if is_valid_tenant(tenant) else [FieldViolation(field, TENANT_RULE)]


def _check_bytes(field: str, value: str, limit: int) -> list[FieldViolation]:
    if len(value.encode()) > limit:
        return [FieldViolation(field, f"must be at most {limit} bytes")]
    if NUL in value:
        return [FieldViolation(field, NUL_RULE)]
    return []


def _raise_if(violations: list[FieldViolation]) -> None:
    if violations:
        raise InvalidInput(violations)


def tenant_not_found(tenant: str) -> NotFound:
    """The one answer for a tenant that does not exist and for one the caller may not see, so
    that it never tells them apart."""
    return NotFound(
        tenant_name(tenant),
        _TENANT_TYPE,
        f"an operator creates it with `tierank tenants set {tenant}`",
    )


def _check_visible(caller: Caller, rpc: str, tenant: str) -> None:
    if not caller.sees_tenant(tenant):
        audit.denied(caller, rpc, f"tenant {tenant} is not the caller's")
        raise tenant_not_found(tenant)


class AdminStore(TenantStore, KeyStore, SpendStore, Protocol):
    """What AdminService manages: tenants, their keys, and what they spent."""


class AdminServicer(admin_pb2_grpc.AdminServiceServicer):
    def __init__(self, storage: AdminStore, sealer: Sealer) -> None:
        self._storage = storage
        self._sealer = sealer

    async def CreateApiKey(
        self, request: admin_pb2.CreateApiKeyRequest, context: grpc.aio.ServicerContext
    ) -> admin_pb2.CreateApiKeyResponse:
        caller = current_caller()
        require_admin(caller, "CreateApiKey")
        violations = _check_tenant("tenant", request.tenant)
        if request.role not in ROLES:
            violations.append(FieldViolation("role", f"unknown value {request.role}"))
        violations += _check_bytes("display_name", request.display_name, MAX_DISPLAY_NAME_BYTES)
        violations += _check_bytes(
            "certificate_subject", request.certificate_subject, MAX_SUBJECT_BYTES
        )
        if request.certificate_subject:
            mapped = await self._storage.key_for_subject(request.certificate_subject)
            if mapped is not None:
                # Another tenant's key is not named: its id is none of this admin's business.
                which = key_name(mapped.key_id) if caller.sees_tenant(mapped.tenant) else "a key"
                violations.append(
                    FieldViolation(
                        "certificate_subject",
                        f"is already mapped to {which}; revoke that key first",
                    )
                )
        _raise_if(violations)
        if ROLES[request.role] == ROLE_OPERATOR:
            require_operator(caller, "CreateApiKey", "making an operator key")
        _check_visible(caller, "CreateApiKey", request.tenant)
        # A key of a tenant that does not exist would make it, without limits: a typo in
        # --tenant would go unnoticed, and a tenant is the operator's to create.
        if await self._storage.get_tenant(request.tenant) is None:
            raise tenant_not_found(request.tenant)
        made = new_key()
        record = KeyRecord(
            key_id=made.key_id,
            tenant=request.tenant,
            role=ROLES[request.role],
            display_name=request.display_name,
            secret_hash=made.secret_hash,
            create_time=time.time(),
            certificate_subject=request.certificate_subject,
        )
        await self._storage.create_key(record)
        audit.admin_action(
            caller, "CreateApiKey", key_name(made.key_id), tenant=record.tenant, role=record.role
        )
        return admin_pb2.CreateApiKeyResponse(key=key_view(record), secret=made.token)

    async def ListApiKeys(
        self, request: admin_pb2.ListApiKeysRequest, context: grpc.aio.ServicerContext
    ) -> admin_pb2.ListApiKeysResponse:
        caller = current_caller()
        require_admin(caller, "ListApiKeys")
        tenant: str | None = request.tenant
        if tenant:
            _raise_if(_check_tenant("tenant", tenant))
            _check_visible(caller, "ListApiKeys", tenant)
        elif not caller.is_operator:
            tenant = caller.tenant
        keys = await self._storage.list_keys(tenant or None, request.include_revoked)
        return admin_pb2.ListApiKeysResponse(keys=[key_view(k) for k in keys])

    async def RevokeApiKey(
        self, request: admin_pb2.RevokeApiKeyRequest, context: grpc.aio.ServicerContext
    ) -> admin_pb2.ApiKey:
        caller = current_caller()
        require_admin(caller, "RevokeApiKey")
        try:
            key_id = parse_key_name(request.name)
        except BadName as bad:
            raise InvalidInput([FieldViolation("name", str(bad))]) from None
        key = await self._storage.get_key(key_id)
        if key is None or not caller.sees_tenant(key.tenant):
            if key is not None:
                audit.denied(caller, "RevokeApiKey", f"{request.name} is not the caller's")
            raise NotFound(request.name, _KEY_TYPE)
        if key.role == ROLE_OPERATOR:
            require_operator(caller, "RevokeApiKey", "revoking an operator key")
        key = await self._storage.revoke_key(key_id, time.time())
        assert key is not None, "keys are never deleted, and this one was read above"
        audit.admin_action(caller, "RevokeApiKey", request.name, tenant=key.tenant)
        return key_view(key)

    async def SetTenant(
        self, request: admin_pb2.SetTenantRequest, context: grpc.aio.ServicerContext
    ) -> admin_pb2.Tenant:
        caller = current_caller()
        require_admin(caller, "SetTenant")
        violations = _check_tenant("tenant", request.tenant)
        limits, bad_limits = limits_from_quota(request.quota)
        violations += bad_limits
        for i, name in enumerate(request.clear_limits):
            if name not in LIMIT_NAMES:
                violations.append(
                    FieldViolation(f"clear_limits[{i}]", f"must be one of {', '.join(LIMIT_NAMES)}")
                )
            elif request.quota.HasField(name):
                violations.append(
                    FieldViolation(f"clear_limits[{i}]", f"{name} is also set in quota")
                )
        _raise_if(violations)
        _check_visible(caller, "SetTenant", request.tenant)
        # Quotas and the use of the server's provider keys bound what a tenant may spend of the
        # platform's money, so a tenant's own admin cannot raise them; creating tenants is the
        # operator's too.
        require_operator(caller, "SetTenant", "setting a tenant's quotas")
        allow = (
            request.allow_server_provider_keys
            if request.HasField("allow_server_provider_keys")
            else None
        )
        tenant = await self._storage.put_tenant(
            request.tenant, limits, list(request.clear_limits), allow, time.time()
        )
        audit.admin_action(
            caller,
            "SetTenant",
            tenant_name(request.tenant),
            quota=limits.given(),
            cleared=list(request.clear_limits),
            allow_server_provider_keys=allow,
        )
        return tenant_view(tenant)

    async def GetTenant(
        self, request: admin_pb2.GetTenantRequest, context: grpc.aio.ServicerContext
    ) -> admin_pb2.Tenant:
        caller = current_caller()
        require_admin(caller, "GetTenant")
        _raise_if(_check_tenant("tenant", request.tenant))
        _check_visible(caller, "GetTenant", request.tenant)
        record = await self._storage.get_tenant(request.tenant)
        if record is None:
            raise tenant_not_found(request.tenant)
        return tenant_view(record)

    async def ListTenants(
        self, request: admin_pb2.ListTenantsRequest, context: grpc.aio.ServicerContext
    ) -> admin_pb2.ListTenantsResponse:
        caller = current_caller()
        require_admin(caller, "ListTenants")
        if caller.is_operator:
            tenants = await self._storage.list_tenants()
        else:
            own = await self._storage.get_tenant(caller.tenant)
            tenants = [own] if own is not None else []
        return admin_pb2.ListTenantsResponse(tenants=[tenant_view(t) for t in tenants])

    async def SetProviderKey(
        self, request: admin_pb2.SetProviderKeyRequest, context: grpc.aio.ServicerContext
    ) -> admin_pb2.Tenant:
        caller = current_caller()
        require_admin(caller, "SetProviderKey")
        violations = _check_tenant("tenant", request.tenant)
        if request.provider not in PROVIDERS:
            violations.append(FieldViolation("provider", f"must be one of {', '.join(PROVIDERS)}"))
        violations += _check_bytes("api_key", request.api_key, MAX_PROVIDER_KEY_BYTES)
        _raise_if(violations)
        _check_visible(caller, "SetProviderKey", request.tenant)
        sealed = None
        if request.api_key:
            try:
                sealed = self._sealer.seal(request.api_key)
            except SealingError as error:
                raise PreconditionFailed(str(error), "NO_SECRET_KEY") from None
        tenant = await self._storage.set_provider_key(request.tenant, request.provider, sealed)
        if tenant is None:
            raise tenant_not_found(request.tenant)
        audit.admin_action(
            caller,
            "SetProviderKey",
            tenant_name(request.tenant),
            provider=request.provider,
            action="set" if sealed else "removed",
        )
        return tenant_view(tenant)

    async def GetUsage(
        self, request: admin_pb2.GetUsageRequest, context: grpc.aio.ServicerContext
    ) -> admin_pb2.TenantUsage:
        caller = current_caller()
        tenant = request.tenant or caller.tenant
        _raise_if(_check_tenant("tenant", tenant))
        _check_visible(caller, "GetUsage", tenant)
        day = utc_day()
        report = await self._storage.usage(tenant, day)
        record = await self._storage.get_tenant(tenant)
        limits = record.limits if record is not None else Limits()
        reserved = spend_view("", report.reserved)
        return admin_pb2.TenantUsage(
            tenant=tenant,
            day=day,
            today=[spend_view(j, s) for j, s in sorted(report.today.items())],
            total=[spend_view(j, s) for j, s in sorted(report.total.items())],
            reserved=reserved,
            quota=quota_view(limits),
            unfinished_jobs=report.unfinished_jobs,
        )
