"""API keys in PostgreSQL."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from tierank.server.storage.base import KeyRecord, KeyStore
from tierank.server.storage.postgres.connection import PostgresConnection
from tierank.server.storage.postgres.tenants import ensure_tenant

_KEY_COLUMNS = (
    "key_id, tenant, role, display_name, secret_hash, create_time, revoke_time, certificate_subject"
)


def _key(row: Sequence[Any]) -> KeyRecord:
    key_id, tenant, role, display_name, secret_hash, *rest = row
    return KeyRecord(key_id, tenant, role, display_name, bytes(secret_hash), *rest)


class PostgresKeys(PostgresConnection, KeyStore):
    async def create_key(self, key: KeyRecord) -> None:
        async with self._transaction() as conn:
            await ensure_tenant(conn, key.tenant, key.create_time)
            await conn.execute(
                f"INSERT INTO api_keys ({_KEY_COLUMNS}) VALUES ({', '.join(['%s'] * 8)})",
                dataclasses.astuple(key),
            )

    async def get_key(self, key_id: str) -> KeyRecord | None:
        row = await self._fetchone(
            f"SELECT {_KEY_COLUMNS} FROM api_keys WHERE key_id = %s", (key_id,)
        )
        return _key(row) if row else None

    async def key_for_subject(self, certificate_subject: str) -> KeyRecord | None:
        if not certificate_subject:
            return None
        # Should two live keys name one subject, the newest wins: mapping a certificate to a
        # new key takes effect at once. The `<> ''` term lets the planner use the partial
        # index api_keys_subject.
        row = await self._fetchone(
            f"SELECT {_KEY_COLUMNS} FROM api_keys "
            "WHERE certificate_subject = %s AND certificate_subject <> '' "
            "AND revoke_time IS NULL ORDER BY create_time DESC, key_id DESC LIMIT 1",
            (certificate_subject,),
        )
        return _key(row) if row else None

    async def list_keys(self, tenant: str | None, include_revoked: bool) -> list[KeyRecord]:
        clauses, params = ["TRUE"], []
        if tenant is not None:
            clauses.append("tenant = %s")
            params.append(tenant)
        if not include_revoked:
            clauses.append("revoke_time IS NULL")
        rows = await self._fetchall(
            f"SELECT {_KEY_COLUMNS} FROM api_keys WHERE {' AND '.join(clauses)} "
            "ORDER BY create_time, key_id",
            params,
        )
        return [_key(row) for row in rows]

    async def revoke_key(self, key_id: str, now: float) -> KeyRecord | None:
        row = await self._fetchone(
            "UPDATE api_keys SET revoke_time = COALESCE(revoke_time, %s) WHERE key_id = %s "
            f"RETURNING {_KEY_COLUMNS}",
            (now, key_id),
        )
        return _key(row) if row else None
