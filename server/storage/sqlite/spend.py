"""Spend: reservations and settled usage in SQLite."""

from __future__ import annotations

import dataclasses
import sqlite3
from collections.abc import Sequence
from typing import Any

from tierank.server.storage.base import Reservation, Settlement, Spend, SpendStore, UsageReport
from tierank.server.storage.rules import UNFINISHED_JOBS, check_daily_limits, plus, spend_from_row
from tierank.server.storage.sqlite.connection import SqliteState, snapshot

_SPEND_SUMS = (
    "COALESCE(SUM(calls), 0), COALESCE(SUM(input_tokens), 0), "
    "COALESCE(SUM(output_tokens), 0), TOTAL(cost_usd)"
)


class SqliteSpend(SqliteState, SpendStore):
    async def reserve_spend(self, reservation: Reservation) -> None:
        r = reservation

        def write(conn: sqlite3.Connection) -> None:
            row = conn.execute(
                "SELECT daily_judge_calls, daily_input_tokens, daily_cost_usd FROM tenants "
                "WHERE tenant = ?",
                (r.tenant,),
            ).fetchone()
            if row is not None and any(limit is not None for limit in row):
                settled = spend_from_row(
                    conn.execute(
                        f"SELECT {_SPEND_SUMS} FROM usage WHERE tenant = ? AND day = ?",
                        (r.tenant, r.day),
                    ).fetchone()
                )
                held = spend_from_row(
                    conn.execute(
                        f"SELECT {_SPEND_SUMS} FROM reservations WHERE tenant = ? AND day = ?",
                        (r.tenant, r.day),
                    ).fetchone()
                )
                check_daily_limits(row, plus(plus(settled, held), r.spend))
            conn.execute(
                "INSERT INTO reservations (reservation_id, tenant, day, judge, calls, "
                "input_tokens, output_tokens, cost_usd) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (r.reservation_id, r.tenant, r.day, r.judge, *dataclasses.astuple(r.spend)),
            )

        await self._writer.submit(write)

    async def settle_spend(self, reservation_id: str, actual: Spend) -> None:
        await self._writer.submit(lambda conn: settle(conn, Settlement(reservation_id, actual)))

    async def usage(self, tenant: str, day: str) -> UsageReport:
        def read(conn: sqlite3.Connection) -> UsageReport:
            # One snapshot: a settle moving spend from `reserved` to `today` between two of
            # these reads would otherwise be counted twice or not at all.
            with snapshot(conn):
                today = {
                    row[0]: spend_from_row(row[1:])
                    for row in conn.execute(
                        "SELECT judge, calls, input_tokens, output_tokens, cost_usd FROM usage "
                        "WHERE tenant = ? AND day = ? ORDER BY judge",
                        (tenant, day),
                    )
                }
                total = {
                    row[0]: spend_from_row(row[1:])
                    for row in conn.execute(
                        f"SELECT judge, {_SPEND_SUMS} FROM usage WHERE tenant = ? "
                        "GROUP BY judge ORDER BY judge",
                        (tenant,),
                    )
                }
                reserved = spend_from_row(
                    conn.execute(
                        f"SELECT {_SPEND_SUMS} FROM reservations WHERE tenant = ? AND day = ?",
                        (tenant, day),
                    ).fetchone()
                )
                (unfinished,) = conn.execute(
                    f"SELECT COUNT(*) FROM jobs WHERE tenant = ? AND {UNFINISHED_JOBS}", (tenant,)
                ).fetchone()
            return UsageReport(today, total, reserved, unfinished)

        return await self._reader.submit(read)


def settle(conn: sqlite3.Connection, settlement: Settlement) -> None:
    row = conn.execute(
        "SELECT tenant, day, judge FROM reservations WHERE reservation_id = ?",
        (settlement.reservation_id,),
    ).fetchone()
    if row is None:
        return
    conn.execute("DELETE FROM reservations WHERE reservation_id = ?", (settlement.reservation_id,))
    add_usage(conn, [(*row, *dataclasses.astuple(settlement.actual))])


def add_usage(conn: sqlite3.Connection, rows: Sequence[Sequence[Any]]) -> None:
    """Add (tenant, day, judge, calls, input_tokens, output_tokens, cost_usd) rows to usage."""
    conn.executemany(
        "INSERT INTO usage (tenant, day, judge, calls, input_tokens, output_tokens, cost_usd) "
        "VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (tenant, day, judge) DO UPDATE SET "
        "calls = calls + excluded.calls, input_tokens = input_tokens + excluded.input_tokens, "
        "output_tokens = output_tokens + excluded.output_tokens, "
        "cost_usd = cost_usd + excluded.cost_usd",
        rows,
    )
