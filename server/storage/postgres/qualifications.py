"""Judge qualifications in PostgreSQL."""

from __future__ import annotations

import dataclasses

from tierank.server.storage.base import QualificationRecord, QualificationStore
from tierank.server.storage.postgres.connection import PostgresConnection

_QUALIFICATION_COLUMNS = (
    "qualification_id, tenant, judge_identity, create_time, usable, weight, payload"
)


class PostgresQualifications(PostgresConnection, QualificationStore):
    async def put_qualification(self, record: QualificationRecord) -> None:
        await self._execute(
            f"INSERT INTO qualifications ({_QUALIFICATION_COLUMNS}) "
            "VALUES (%s, %s, %s, %s, %s, %s, %s)",
            dataclasses.astuple(record),
        )

    async def list_qualifications(
        self, tenant: str, judge_identity: str | None, limit: int
    ) -> list[QualificationRecord]:
        rows = await self._fetchall(
            f"SELECT {_QUALIFICATION_COLUMNS} FROM qualifications WHERE tenant = %(tenant)s "
            "AND (%(judge)s::text IS NULL OR judge_identity = %(judge)s) "
            "ORDER BY create_time DESC, qualification_id DESC LIMIT %(limit)s",
            {"tenant": tenant, "judge": judge_identity, "limit": limit},
        )
        return [_qualification(row) for row in rows]

    async def delete_qualification(
        self, tenant: str, qualification_id: str
    ) -> QualificationRecord | None:
        row = await self._fetchone(
            "DELETE FROM qualifications WHERE tenant = %s AND qualification_id = %s "
            f"RETURNING {_QUALIFICATION_COLUMNS}",
            (tenant, qualification_id),
        )
        return None if row is None else _qualification(row)


def _qualification(row: tuple) -> QualificationRecord:
    qualification_id, tenant, judge_identity, created, usable, weight, payload = row
    return QualificationRecord(
        qualification_id, tenant, judge_identity, created, usable, weight, bytes(payload)
    )
