"""Fixtures for the storage contract: every test runs once on SQLite and once on PostgreSQL
(found by the `postgres_url` fixture of tests/conftest.py), each in a schema of its own."""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from postgres_cluster import drop_schema, fresh_schema

from tierank.server.settings import ServerSettings
from tierank.server.storage.base import Storage
from tierank.server.storage.postgres import PostgresStorage
from tierank.server.storage.sqlite import SqliteStorage

# Several connections, so that concurrent calls really run side by side in the database.
POOL_SIZE = 5
# A replica whose statements may run as long as a server's do by default.
connect = partial(
    PostgresStorage.connect, statement_timeout_s=ServerSettings().db_statement_timeout_s
)


@dataclass
class Backend:
    """Opens storage on one database; opening it again reopens the same data."""

    name: str
    sqlite_path: Path | None = None
    postgres_url: str = ""
    schema: str = ""

    async def open(self) -> Storage:
        if self.sqlite_path is not None:
            return SqliteStorage(self.sqlite_path, synchronous="NORMAL")
        return await connect(self.postgres_url, pool_size=POOL_SIZE, schema=self.schema)


@pytest.fixture(params=["sqlite", "postgres"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    if request.param == "sqlite":
        yield Backend("sqlite", sqlite_path=tmp_path / "contract.db")
        return
    url = request.getfixturevalue("postgres_url")
    schema = fresh_schema()
    yield Backend("postgres", postgres_url=url, schema=schema)
    drop_schema(url, schema)


@pytest.fixture
async def storage(backend: Backend) -> AsyncIterator[Storage]:
    opened = await backend.open()
    yield opened
    await opened.close()
