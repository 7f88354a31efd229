"""Lookups by request_id use the request indexes on SQLite. The indexes are partial (request_id
<> ''), which a planner uses only where the query implies the predicate: without it, each
CreateJob with a request_id scanned all of its tenant's jobs (5 ms at 10,000 jobs, 20 s of the
writer in a 10,000-query study)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from tierank.server.storage.sqlite.jobs import JOB_BY_REQUEST
from tierank.server.storage.sqlite.operations import OPERATION_BY_REQUEST
from tierank.server.storage.sqlite.storage import SqliteStorage
from tierank.server.storage.sqlite.studies import STUDY_BY_REQUEST


@pytest.mark.parametrize(
    ("statement", "index"),
    [
        (JOB_BY_REQUEST, "jobs_request"),
        (STUDY_BY_REQUEST, "studies_request"),
        (OPERATION_BY_REQUEST, "operations_request"),
    ],
)
async def test_lookups_by_request_id_use_the_request_index(
    tmp_path: Path, statement: str, index: str
) -> None:
    path = tmp_path / "tierank.db"
    await SqliteStorage(path, "NORMAL").close()  # made, with every migration
    with sqlite3.connect(path) as conn:
        plan = conn.execute(f"EXPLAIN QUERY PLAN {statement}", ("tenant", "r1")).fetchall()
    assert any(f"USING INDEX {index} (tenant=? AND request_id=?)" in row[3] for row in plan), plan
