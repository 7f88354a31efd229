"""Tenants, their limits and encrypted provider credentials in SQLite."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence

from tierank.server.storage.base import (
    DEFAULT_LIMITS,
    LIMIT_NAMES,
    Limits,
    TenantRecord,
    TenantStore,
)
from tierank.server.storage.rules import tenant_changes, tenant_from_row
from tierank.server.storage.sqlite.connection import SqliteState, snapshot

_TENANT_COLUMNS = (
    f"tenant, {', '.join(LIMIT_NAMES)}, allow_server_provider_keys, create_time, update_time"
)


class SqliteTenants(SqliteState, TenantStore):
    async def put_tenant(
        self,
        tenant: str,
        set_limits: Limits,
        clear_limits: Sequence[str],
        allow_server_provider_keys: bool | None,
        now: float,
    ) -> TenantRecord:
        changes = tenant_changes(set_limits, clear_limits, allow_server_provider_keys, now)
        assignments = ", ".join(f"{column} = ?" for column in changes)

        def write(conn: sqlite3.Connection) -> TenantRecord:
            ensure_tenant(conn, tenant, now)
            conn.execute(
                f"UPDATE tenants SET {assignments} WHERE tenant = ?", (*changes.values(), tenant)
            )
            record = read_tenant(conn, tenant)
            assert record is not None  # ensured above, in this transaction
            return record

        return await self._writer.submit(write)

    async def get_tenant(self, tenant: str) -> TenantRecord | None:
        def read(conn: sqlite3.Connection) -> TenantRecord | None:
            with snapshot(conn):
                return read_tenant(conn, tenant)

        return await self._reader.submit(read)

    async def list_tenants(self) -> list[TenantRecord]:
        def read(conn: sqlite3.Connection) -> list[TenantRecord]:
            with snapshot(conn):
                providers: dict[str, list[str]] = {}
                for tenant, provider in conn.execute(
                    "SELECT tenant, provider FROM provider_keys ORDER BY tenant, provider"
                ):
                    providers.setdefault(tenant, []).append(provider)
                rows = conn.execute(f"SELECT {_TENANT_COLUMNS} FROM tenants ORDER BY tenant")
                return [tenant_from_row(row, providers.get(row[0], ())) for row in rows]

        return await self._reader.submit(read)

    async def set_provider_key(
        self, tenant: str, provider: str, sealed: bytes | None
    ) -> TenantRecord | None:
        def write(conn: sqlite3.Connection) -> TenantRecord | None:
            if conn.execute("SELECT 1 FROM tenants WHERE tenant = ?", (tenant,)).fetchone() is None:
                return None
            if sealed is None:
                conn.execute(
                    "DELETE FROM provider_keys WHERE tenant = ? AND provider = ?",
                    (tenant, provider),
                )
            else:
                conn.execute(
                    "INSERT OR REPLACE INTO provider_keys (tenant, provider, sealed) "
                    "VALUES (?, ?, ?)",
                    (tenant, provider, sealed),
                )
            return read_tenant(conn, tenant)

        return await self._writer.submit(write)

    async def provider_key(self, tenant: str, provider: str) -> bytes | None:
        def read(conn: sqlite3.Connection) -> bytes | None:
            row = conn.execute(
                "SELECT sealed FROM provider_keys WHERE tenant = ? AND provider = ?",
                (tenant, provider),
            ).fetchone()
            return row[0] if row else None

        return await self._reader.submit(read)


def read_tenant(conn: sqlite3.Connection, tenant: str) -> TenantRecord | None:
    row = conn.execute(
        f"SELECT {_TENANT_COLUMNS} FROM tenants WHERE tenant = ?", (tenant,)
    ).fetchone()
    if row is None:
        return None
    providers = conn.execute(
        "SELECT provider FROM provider_keys WHERE tenant = ? ORDER BY provider", (tenant,)
    )
    return tenant_from_row(row, [provider for (provider,) in providers])


def ensure_tenant(conn: sqlite3.Connection, tenant: str, now: float) -> None:
    defaults = DEFAULT_LIMITS.given()
    columns = "".join(f", {name}" for name in defaults)
    marks = ", ?" * len(defaults)
    conn.execute(
        "INSERT OR IGNORE INTO tenants (tenant, allow_server_provider_keys, create_time, "
        f"update_time{columns}) VALUES (?, 1, ?, ?{marks})",
        (tenant, now, now, *defaults.values()),
    )
