"""Judge qualifications in SQLite."""

from __future__ import annotations

import dataclasses
import sqlite3
from collections.abc import Sequence
from typing import Any

from tierank.server.storage.base import QualificationRecord, QualificationStore
from tierank.server.storage.sqlite.connection import SqliteState

_QUALIFICATION_COLUMNS = (
    "qualification_id, tenant, judge_identity, create_time, usable, weight, payload"
)


def _qualification(row: Sequence[Any]) -> QualificationRecord:
    qualification_id, tenant, judge_identity, created, usable, weight, payload = row
    return QualificationRecord(
        qualification_id, tenant, judge_identity, created, bool(usable), weight, bytes(payload)
    )


class SqliteQualifications(SqliteState, QualificationStore):
    async def put_qualification(self, record: QualificationRecord) -> None:
        def write(conn: sqlite3.Connection) -> None:
            conn.execute(
                f"INSERT INTO qualifications ({_QUALIFICATION_COLUMNS}) "
                "VALUES (?, ?, ?, ?, ?, ?, ?)",
                dataclasses.astuple(record),
            )

        await self._writer.submit(write)

    async def list_qualifications(
        self, tenant: str, judge_identity: str | None, limit: int
    ) -> list[QualificationRecord]:
        clauses, params = ["tenant = ?"], [tenant]
        if judge_identity is not None:
            clauses.append("judge_identity = ?")
            params.append(judge_identity)
        query = (
            f"SELECT {_QUALIFICATION_COLUMNS} FROM qualifications WHERE {' AND '.join(clauses)} "
            "ORDER BY create_time DESC, qualification_id DESC LIMIT ?"
        )

        def read(conn: sqlite3.Connection) -> list[QualificationRecord]:
            rows = conn.execute(query, (*params, limit)).fetchall()
            return [_qualification(row) for row in rows]

        return await self._reader.submit(read)

    async def delete_qualification(
        self, tenant: str, qualification_id: str
    ) -> QualificationRecord | None:
        def write(conn: sqlite3.Connection) -> QualificationRecord | None:
            row = conn.execute(
                f"DELETE FROM qualifications WHERE tenant = ? AND qualification_id = ? "
                f"RETURNING {_QUALIFICATION_COLUMNS}",
                (tenant, qualification_id),
            ).fetchone()
            return None if row is None else _qualification(row)

        return await self._writer.submit(write)
