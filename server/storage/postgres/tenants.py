"""Tenants, their limits and encrypted provider credentials in PostgreSQL."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import psycopg
from psycopg import sql

from tierank.server.storage.base import (
    DEFAULT_LIMITS,
    LIMIT_NAMES,
    Limits,
    TenantRecord,
    TenantStore,
)
from tierank.server.storage.postgres.connection import PostgresConnection
from tierank.server.storage.rules import tenant_changes, tenant_from_row

_TENANT_COLUMNS = (
    f"tenant, {', '.join(LIMIT_NAMES)}, allow_server_provider_keys, create_time, update_time"
)
# The tenant's provider names ride along in the same statement: one snapshot, one round trip.
_TENANT_SELECT = (
    f"SELECT {_TENANT_COLUMNS}, ARRAY(SELECT provider FROM provider_keys p "
    "WHERE p.tenant = tenants.tenant ORDER BY provider) FROM tenants"
)


def _tenant(row: Sequence[Any]) -> TenantRecord:
    return tenant_from_row(row[:-1], row[-1])


class PostgresTenants(PostgresConnection, TenantStore):
    async def put_tenant(
        self,
        tenant: str,
        set_limits: Limits,
        clear_limits: Sequence[str],
        allow_server_provider_keys: bool | None,
        now: float,
    ) -> TenantRecord:
        changes = tenant_changes(set_limits, clear_limits, allow_server_provider_keys, now)
        assignments = sql.SQL(", ").join(
            sql.SQL("{} = %s").format(sql.Identifier(column)) for column in changes
        )
        async with self._transaction() as conn:
            await ensure_tenant(conn, tenant, now)
            await conn.execute(
                sql.SQL("UPDATE tenants SET {} WHERE tenant = %s").format(assignments),
                (*changes.values(), tenant),
            )
            cursor = await conn.execute(f"{_TENANT_SELECT} WHERE tenant = %s", (tenant,))
            row = await cursor.fetchone()
        assert row is not None  # ensured above, in this transaction
        return _tenant(row)

    async def get_tenant(self, tenant: str) -> TenantRecord | None:
        row = await self._fetchone(f"{_TENANT_SELECT} WHERE tenant = %s", (tenant,))
        return _tenant(row) if row else None

    async def list_tenants(self) -> list[TenantRecord]:
        return [_tenant(row) for row in await self._fetchall(f"{_TENANT_SELECT} ORDER BY tenant")]

    async def set_provider_key(
        self, tenant: str, provider: str, sealed: bytes | None
    ) -> TenantRecord | None:
        async with self._transaction() as conn:
            # The tenant row is locked so that it cannot be deleted or race this change.
            cursor = await conn.execute(
                "SELECT 1 FROM tenants WHERE tenant = %s FOR UPDATE", (tenant,)
            )
            if await cursor.fetchone() is None:
                return None
            if sealed is None:
                await conn.execute(
                    "DELETE FROM provider_keys WHERE tenant = %s AND provider = %s",
                    (tenant, provider),
                )
            else:
                await conn.execute(
                    "INSERT INTO provider_keys (tenant, provider, sealed) VALUES (%s, %s, %s) "
                    "ON CONFLICT (tenant, provider) DO UPDATE SET sealed = excluded.sealed",
                    (tenant, provider, sealed),
                )
            cursor = await conn.execute(f"{_TENANT_SELECT} WHERE tenant = %s", (tenant,))
            row = await cursor.fetchone()
        return _tenant(row) if row else None

    async def provider_key(self, tenant: str, provider: str) -> bytes | None:
        row = await self._fetchone(
            "SELECT sealed FROM provider_keys WHERE tenant = %s AND provider = %s",
            (tenant, provider),
        )
        return bytes(row[0]) if row else None


async def ensure_tenant(conn: psycopg.AsyncConnection, tenant: str, now: float) -> None:
    defaults = DEFAULT_LIMITS.given()
    columns = [sql.Identifier(name) for name in defaults]
    await conn.execute(
        sql.SQL(
            "INSERT INTO tenants (tenant, allow_server_provider_keys, create_time, update_time"
            "{columns}) VALUES (%s, TRUE, %s, %s{marks}) ON CONFLICT (tenant) DO NOTHING"
        ).format(
            columns=sql.SQL("").join(sql.SQL(", {}").format(c) for c in columns),
            marks=sql.SQL(", %s" * len(columns)),
        ),
        (tenant, now, now, *defaults.values()),
    )
