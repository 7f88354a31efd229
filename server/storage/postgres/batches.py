"""Provider batches in PostgreSQL (see ProviderBatchJournal).

Times a replica writes (submitted, updated, ended, poll leases) are the database's clock: a
poll lease taken on one replica is measured by the same clock on every other.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from tierank.server.storage.base import (
    BatchState,
    ProviderBatchCall,
    ProviderBatchJournal,
    ProviderBatchRecord,
)
from tierank.server.storage.postgres.connection import NOW, PostgresConnection, text
from tierank.server.storage.rules import (
    FINAL_BATCH,
    FINAL_BATCH_STATES,
    PROVIDER_BATCH_COLUMNS,
    UNENDED_BATCH,
    provider_batch_from_row,
)

# The vendor's message is free text from outside, kept as UTF-8 bytes (see migrations.py).
_MESSAGE = PROVIDER_BATCH_COLUMNS.split(", ").index("message")

# The clock read once for a whole write, as SQLite's writes read it: times a write sets
# together are equal (NOW is read again wherever it is written).
_CLOCK = f"(SELECT {NOW} AS now) AS clock"


def _batch(row: Sequence[Any]) -> ProviderBatchRecord:
    return provider_batch_from_row(row, text(row[_MESSAGE]))


class PostgresProviderBatches(PostgresConnection, ProviderBatchJournal):
    async def journal_batch(
        self, record: ProviderBatchRecord, calls: Sequence[ProviderBatchCall]
    ) -> None:
        values = list(dataclasses.astuple(record))
        values[7] = record.state.value
        values[11] = record.message.encode()
        async with self._transaction() as conn:
            await conn.execute(
                f"INSERT INTO provider_batches ({PROVIDER_BATCH_COLUMNS}) "
                f"VALUES ({', '.join(['%s'] * len(values))})",
                values,
            )
            async with conn.cursor() as cursor:
                await cursor.executemany(
                    "INSERT INTO provider_batch_calls (batch_id, custom_id, job_id, call_id) "
                    "VALUES (%s, %s, %s, %s)",
                    [dataclasses.astuple(call) for call in calls],
                )

    async def batch_submitted(self, batch_id: str, vendor_id: str) -> bool:
        return await self._from_submitting(
            batch_id, BatchState.OPEN, "vendor_id", vendor_id, "submit_time"
        )

    async def batch_not_submitted(self, batch_id: str, message: str) -> bool:
        return await self._from_submitting(
            batch_id, BatchState.FAILED, "message", message.encode(), "end_time"
        )

    async def _from_submitting(
        self, batch_id: str, state: BatchState, column: str, value: object, time_column: str
    ) -> bool:
        """Move a SUBMITTING batch to `state`, with `column` set to `value` and `time_column`
        to the database's now; False when it was not SUBMITTING any more."""
        row = await self._fetchone(
            f"UPDATE provider_batches SET state = %s, {column} = %s, {time_column} = clock.now, "
            f"update_time = clock.now FROM {_CLOCK} WHERE batch_id = %s AND state = %s "
            "RETURNING 1",
            (state.value, value, batch_id, BatchState.SUBMITTING.value),
        )
        return row is not None

    async def batch_status(
        self,
        batch_id: str,
        state: BatchState,
        vendor_status: str,
        counts: str,
        message: str = "",
    ) -> None:
        ended = "clock.now" if state.value in FINAL_BATCH_STATES else "0"
        await self._execute(
            "UPDATE provider_batches SET state = %s, vendor_status = %s, counts = %s, "
            f"message = %s, update_time = clock.now, end_time = {ended} FROM {_CLOCK} "
            f"WHERE batch_id = %s AND NOT {FINAL_BATCH}",
            (state.value, vendor_status, counts, message.encode(), batch_id),
        )

    async def get_provider_batch(self, batch_id: str) -> ProviderBatchRecord | None:
        row = await self._fetchone(
            f"SELECT {PROVIDER_BATCH_COLUMNS} FROM provider_batches WHERE batch_id = %s",
            (batch_id,),
        )
        return _batch(row) if row else None

    async def batch_of_call(
        self, job_id: str, call_id: str
    ) -> tuple[ProviderBatchRecord, str] | None:
        columns = ", ".join(f"b.{column}" for column in PROVIDER_BATCH_COLUMNS.split(", "))
        row = await self._fetchone(
            f"SELECT {columns}, c.custom_id FROM provider_batch_calls c "
            "JOIN provider_batches b ON b.batch_id = c.batch_id "
            "WHERE c.job_id = %s AND c.call_id = %s ORDER BY b.batch_id DESC LIMIT 1",
            (job_id, call_id),
        )
        return (_batch(row[:-1]), row[-1]) if row else None

    async def take_batch_poll(self, batch_id: str, poller: str, lease_s: float) -> bool:
        # One statement: replicas asking at once queue on the row's lock, and each sees the
        # lease the one before it took.
        row = await self._fetchone(
            f"UPDATE provider_batches SET poller = %(poller)s, poll_until = {NOW} + %(lease)s "
            f"WHERE batch_id = %(batch)s AND (poller = %(poller)s OR poll_until < {NOW}) "
            "RETURNING 1",
            {"poller": poller, "lease": lease_s, "batch": batch_id},
        )
        return row is not None

    async def withdraw_batch_calls(self, job_id: str) -> list[ProviderBatchRecord]:
        async with self._transaction() as conn:
            # The batches locked first, in one order: two jobs of one batch withdrawing at once
            # then run one after the other, and the second sees the first's calls withdrawn
            # (else each would see the other's still wanted, and neither would return it).
            cursor = await conn.execute(
                "SELECT batch_id FROM provider_batches WHERE batch_id IN "
                "(SELECT batch_id FROM provider_batch_calls WHERE job_id = %s) "
                f"AND {UNENDED_BATCH} ORDER BY batch_id FOR UPDATE",
                (job_id,),
            )
            touched = [batch_id for (batch_id,) in await cursor.fetchall()]
            if not touched:
                return []
            await conn.execute(
                "UPDATE provider_batch_calls SET withdrawn = TRUE "
                "WHERE job_id = %s AND batch_id = ANY(%s)",
                (job_id, touched),
            )
            cursor = await conn.execute(
                f"SELECT {PROVIDER_BATCH_COLUMNS} FROM provider_batches b "
                "WHERE batch_id = ANY(%s) AND NOT EXISTS (SELECT 1 FROM provider_batch_calls c "
                "WHERE c.batch_id = b.batch_id AND NOT c.withdrawn) ORDER BY batch_id",
                (touched,),
                binary=True,
            )
            return [_batch(row) for row in await cursor.fetchall()]

    async def owner_batches(
        self, tenant: str, owner: str, unended_only: bool = False
    ) -> list[ProviderBatchRecord]:
        unended = f" AND {UNENDED_BATCH}" if unended_only else ""
        rows = await self._fetchall(
            f"SELECT {PROVIDER_BATCH_COLUMNS} FROM provider_batches "
            f"WHERE tenant = %s AND owner = %s{unended} ORDER BY batch_id",
            (tenant, owner),
        )
        return [_batch(row) for row in rows]
