"""API keys in SQLite."""

from __future__ import annotations

import dataclasses
import sqlite3

from tierank.server.storage.base import KeyRecord, KeyStore
from tierank.server.storage.sqlite.connection import SqliteState
from tierank.server.storage.sqlite.tenants import ensure_tenant

_KEY_COLUMNS = (
    "key_id, tenant, role, display_name, secret_hash, create_time, revoke_time, certificate_subject"
)


class SqliteKeys(SqliteState, KeyStore):
    async def create_key(self, key: KeyRecord) -> None:
        def write(conn: sqlite3.Connection) -> None:
            ensure_tenant(conn, key.tenant, key.create_time)
            conn.execute(
                f"INSERT INTO api_keys ({_KEY_COLUMNS}) VALUES ({', '.join('?' * 8)})",
                dataclasses.astuple(key),
            )

        await self._writer.submit(write)

    async def get_key(self, key_id: str) -> KeyRecord | None:
        def read(conn: sqlite3.Connection) -> KeyRecord | None:
            row = conn.execute(
                f"SELECT {_KEY_COLUMNS} FROM api_keys WHERE key_id = ?", (key_id,)
            ).fetchone()
            return KeyRecord(*row) if row else None

        return await self._reader.submit(read)

    async def key_for_subject(self, certificate_subject: str) -> KeyRecord | None:
        if not certificate_subject:
            return None

        def read(conn: sqlite3.Connection) -> KeyRecord | None:
            # Should two live keys name one subject, the newest wins: mapping a certificate to
            # a new key takes effect at once. The `!= ''` term lets SQLite use the partial
            # index api_keys_subject.
            row = conn.execute(
                f"SELECT {_KEY_COLUMNS} FROM api_keys "
                "WHERE certificate_subject = ? AND certificate_subject != '' "
                "AND revoke_time IS NULL ORDER BY create_time DESC, key_id DESC LIMIT 1",
                (certificate_subject,),
            ).fetchone()
            return KeyRecord(*row) if row else None

        return await self._reader.submit(read)

    async def list_keys(self, tenant: str | None, include_revoked: bool) -> list[KeyRecord]:
        clauses, params = ["1"], []
        if tenant is not None:
            clauses.append("tenant = ?")
            params.append(tenant)
        if not include_revoked:
            clauses.append("revoke_time IS NULL")
        sql = (
            f"SELECT {_KEY_COLUMNS} FROM api_keys WHERE {' AND '.join(clauses)} "
            "ORDER BY create_time, key_id"
        )

        def read(conn: sqlite3.Connection) -> list[KeyRecord]:
            return [KeyRecord(*row) for row in conn.execute(sql, params)]

        return await self._reader.submit(read)

    async def revoke_key(self, key_id: str, now: float) -> KeyRecord | None:
        def write(conn: sqlite3.Connection) -> KeyRecord | None:
            conn.execute(
                "UPDATE api_keys SET revoke_time = COALESCE(revoke_time, ?) WHERE key_id = ?",
                (now, key_id),
            )
            row = conn.execute(
                f"SELECT {_KEY_COLUMNS} FROM api_keys WHERE key_id = ?", (key_id,)
            ).fetchone()
            return KeyRecord(*row) if row else None

        return await self._writer.submit(write)
