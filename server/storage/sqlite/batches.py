"""Provider batches in SQLite (see ProviderBatchJournal)."""

from __future__ import annotations

import dataclasses
import sqlite3
import time
from collections.abc import Sequence

from tierank.server.storage.base import (
    BatchState,
    ProviderBatchCall,
    ProviderBatchJournal,
    ProviderBatchRecord,
)
from tierank.server.storage.rules import (
    FINAL_BATCH,
    FINAL_BATCH_STATES,
    PROVIDER_BATCH_COLUMNS,
    UNENDED_BATCH,
    provider_batch_from_row,
)
from tierank.server.storage.sqlite.connection import SqliteState


class SqliteProviderBatches(SqliteState, ProviderBatchJournal):
    async def journal_batch(
        self, record: ProviderBatchRecord, calls: Sequence[ProviderBatchCall]
    ) -> None:
        values = dataclasses.astuple(record)
        values = (*values[:7], record.state.value, *values[8:])

        def write(conn: sqlite3.Connection) -> None:
            conn.execute(
                f"INSERT INTO provider_batches ({PROVIDER_BATCH_COLUMNS}) "
                f"VALUES ({', '.join('?' * len(values))})",
                values,
            )
            conn.executemany(
                "INSERT INTO provider_batch_calls (batch_id, custom_id, job_id, call_id) "
                "VALUES (?, ?, ?, ?)",
                [dataclasses.astuple(call) for call in calls],
            )

        await self._writer.submit(write)

    async def batch_submitted(self, batch_id: str, vendor_id: str) -> bool:
        return await self._from_submitting(
            batch_id, BatchState.OPEN, "vendor_id", vendor_id, "submit_time"
        )

    async def batch_not_submitted(self, batch_id: str, message: str) -> bool:
        return await self._from_submitting(
            batch_id, BatchState.FAILED, "message", message, "end_time"
        )

    async def _from_submitting(
        self, batch_id: str, state: BatchState, column: str, value: str, time_column: str
    ) -> bool:
        """Move a SUBMITTING batch to `state`, with `column` set to `value` and `time_column`
        to now; False when it was not SUBMITTING any more."""

        def write(conn: sqlite3.Connection) -> bool:
            now = time.time()
            cursor = conn.execute(
                f"UPDATE provider_batches SET state = ?, {column} = ?, {time_column} = ?, "
                "update_time = ? WHERE batch_id = ? AND state = ?",
                (state.value, value, now, now, batch_id, BatchState.SUBMITTING.value),
            )
            return cursor.rowcount == 1

        return await self._writer.submit(write)

    async def batch_status(
        self,
        batch_id: str,
        state: BatchState,
        vendor_status: str,
        counts: str,
        message: str = "",
    ) -> None:
        def write(conn: sqlite3.Connection) -> None:
            now = time.time()
            ended = now if state.value in FINAL_BATCH_STATES else 0.0
            conn.execute(
                "UPDATE provider_batches SET state = ?, vendor_status = ?, counts = ?, "
                "message = ?, update_time = ?, end_time = ? "
                f"WHERE batch_id = ? AND NOT {FINAL_BATCH}",
                (state.value, vendor_status, counts, message, now, ended, batch_id),
            )

        await self._writer.submit(write)

    async def get_provider_batch(self, batch_id: str) -> ProviderBatchRecord | None:
        def read(conn: sqlite3.Connection) -> ProviderBatchRecord | None:
            row = conn.execute(
                f"SELECT {PROVIDER_BATCH_COLUMNS} FROM provider_batches WHERE batch_id = ?",
                (batch_id,),
            ).fetchone()
            return provider_batch_from_row(row) if row else None

        return await self._reader.submit(read)

    async def batch_of_call(
        self, job_id: str, call_id: str
    ) -> tuple[ProviderBatchRecord, str] | None:
        columns = ", ".join(f"b.{c.strip()}" for c in PROVIDER_BATCH_COLUMNS.split(","))

        def read(conn: sqlite3.Connection) -> tuple[ProviderBatchRecord, str] | None:
            row = conn.execute(
                f"SELECT {columns}, c.custom_id FROM provider_batch_calls c "
                "JOIN provider_batches b ON b.batch_id = c.batch_id "
                "WHERE c.job_id = ? AND c.call_id = ? ORDER BY b.batch_id DESC LIMIT 1",
                (job_id, call_id),
            ).fetchone()
            return (provider_batch_from_row(row[:-1]), row[-1]) if row else None

        return await self._reader.submit(read)

    async def take_batch_poll(self, batch_id: str, poller: str, lease_s: float) -> bool:
        # In memory, as the study leases: the file lock makes this process the database's
        # only server, so a lease in the file would only be a dead process's, to wait out.
        now = time.time()
        holder, until = self._batch_polls.get(batch_id, (poller, 0.0))
        if holder != poller and until >= now:
            return False
        self._batch_polls[batch_id] = (poller, now + lease_s)
        return True

    async def withdraw_batch_calls(self, job_id: str) -> list[ProviderBatchRecord]:
        def write(conn: sqlite3.Connection) -> list[ProviderBatchRecord]:
            touched = [
                batch_id
                for (batch_id,) in conn.execute(
                    "SELECT DISTINCT c.batch_id FROM provider_batch_calls c "
                    "JOIN provider_batches b ON b.batch_id = c.batch_id "
                    f"WHERE c.job_id = ? AND b.{UNENDED_BATCH} ORDER BY c.batch_id",
                    (job_id,),
                ).fetchall()
            ]
            unwanted = []
            for batch_id in touched:
                # Only unended batches: an ended one's calls keep what they were.
                conn.execute(
                    "UPDATE provider_batch_calls SET withdrawn = 1 "
                    "WHERE batch_id = ? AND job_id = ?",
                    (batch_id, job_id),
                )
                wanted = conn.execute(
                    "SELECT 1 FROM provider_batch_calls WHERE batch_id = ? AND withdrawn = 0 "
                    "LIMIT 1",
                    (batch_id,),
                ).fetchone()
                if wanted is None:
                    row = conn.execute(
                        f"SELECT {PROVIDER_BATCH_COLUMNS} FROM provider_batches WHERE batch_id = ?",
                        (batch_id,),
                    ).fetchone()
                    unwanted.append(provider_batch_from_row(row))
            return unwanted

        return await self._writer.submit(write)

    async def owner_batches(
        self, tenant: str, owner: str, unended_only: bool = False
    ) -> list[ProviderBatchRecord]:
        unended = f" AND {UNENDED_BATCH}" if unended_only else ""

        def read(conn: sqlite3.Connection) -> list[ProviderBatchRecord]:
            rows = conn.execute(
                f"SELECT {PROVIDER_BATCH_COLUMNS} FROM provider_batches "
                f"WHERE tenant = ? AND owner = ?{unended} ORDER BY batch_id",
                (tenant, owner),
            ).fetchall()
            return [provider_batch_from_row(row) for row in rows]

        return await self._reader.submit(read)
