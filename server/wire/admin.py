"""Tenants, API keys, quotas and spend as the API shows them, from their storage records."""

from __future__ import annotations

from tierank.server.errors import FieldViolation
from tierank.server.names import key_name, tenant_name
from tierank.server.storage.base import LIMIT_NAMES, KeyRecord, Limits, Spend, TenantRecord
from tierank.server.tenancy.keys import ROLE_ADMIN, ROLE_MEMBER, ROLE_OPERATOR
from tierank.server.wire.common import timestamp
from tierank.v1 import admin_pb2

# A role as the API names it, and as storage and the checks of a caller do.
ROLES = {
    admin_pb2.ROLE_UNSPECIFIED: ROLE_MEMBER,
    admin_pb2.ROLE_MEMBER: ROLE_MEMBER,
    admin_pb2.ROLE_ADMIN: ROLE_ADMIN,
    admin_pb2.ROLE_OPERATOR: ROLE_OPERATOR,
}
_ROLE_ENUMS = {
    ROLE_MEMBER: admin_pb2.ROLE_MEMBER,
    ROLE_ADMIN: admin_pb2.ROLE_ADMIN,
    ROLE_OPERATOR: admin_pb2.ROLE_OPERATOR,
}


def key_view(key: KeyRecord) -> admin_pb2.ApiKey:
    view = admin_pb2.ApiKey(
        name=key_name(key.key_id),
        tenant=key.tenant,
        role=_ROLE_ENUMS[key.role],
        display_name=key.display_name,
        create_time=timestamp(key.create_time),
        certificate_subject=key.certificate_subject,
    )
    if key.revoke_time is not None:
        view.revoke_time.CopyFrom(timestamp(key.revoke_time))
    return view


def quota_view(limits: Limits) -> admin_pb2.Quota:
    quota = admin_pb2.Quota()
    for name in LIMIT_NAMES:
        value = getattr(limits, name)
        if value is not None:
            setattr(quota, name, value)
    return quota


def limits_from_quota(quota: admin_pb2.Quota) -> tuple[Limits, list[FieldViolation]]:
    """The limits a Quota sets (an unset field sets none), and the violations of its values."""
    values: dict[str, float | int] = {}
    violations: list[FieldViolation] = []
    for name in LIMIT_NAMES:
        if quota.HasField(name):
            value = getattr(quota, name)
            if not value >= 0:  # also refuses NaN
                violations.append(FieldViolation(f"quota.{name}", "must not be negative"))
            values[name] = value
    return Limits(**values), violations  # type: ignore[arg-type]


def tenant_view(tenant: TenantRecord) -> admin_pb2.Tenant:
    return admin_pb2.Tenant(
        name=tenant_name(tenant.tenant),
        quota=quota_view(tenant.limits),
        provider_keys=list(tenant.provider_keys),
        allow_server_provider_keys=tenant.allow_server_provider_keys,
        create_time=timestamp(tenant.create_time),
        update_time=timestamp(tenant.update_time),
    )


def spend_view(judge: str, spend: Spend) -> admin_pb2.JudgeSpend:
    return admin_pb2.JudgeSpend(
        judge=judge,
        calls=spend.calls,
        input_tokens=spend.input_tokens,
        output_tokens=spend.output_tokens,
        cost_usd=spend.cost_usd,
    )
