"""Spend: reservations and settled usage in PostgreSQL."""

from __future__ import annotations

import dataclasses

from tierank.server.storage.base import Reservation, Spend, SpendStore, UsageReport
from tierank.server.storage.postgres.connection import SPEND_LOCK, PostgresConnection
from tierank.server.storage.rules import UNFINISHED_JOBS, check_daily_limits, plus, spend_from_row


def _sums(table: str) -> str:
    """calls, input_tokens, output_tokens, cost_usd of a tenant's day in `table`."""
    return (
        "SELECT COALESCE(SUM(calls), 0)::bigint, COALESCE(SUM(input_tokens), 0)::bigint, "
        "COALESCE(SUM(output_tokens), 0)::bigint, COALESCE(SUM(cost_usd), 0)::float8 "
        f"FROM {table} WHERE tenant = %(tenant)s AND day = %(day)s"
    )


_DAILY_LIMITED = (
    "(daily_judge_calls IS NOT NULL OR daily_input_tokens IS NOT NULL "
    "OR daily_cost_usd IS NOT NULL)"
)
_HOLD = (
    "INSERT INTO reservations (reservation_id, tenant, day, judge, calls, input_tokens, "
    "output_tokens, cost_usd, owner)"
)
_HELD_VALUES = (
    "%(id)s, %(tenant)s, %(day)s, %(judge)s, %(calls)s, %(input_tokens)s, %(output_tokens)s, "
    "%(cost_usd)s, %(owner)s"
)
ADD_USAGE = (
    "ON CONFLICT (tenant, day, judge) DO UPDATE SET calls = usage.calls + excluded.calls, "
    "input_tokens = usage.input_tokens + excluded.input_tokens, "
    "output_tokens = usage.output_tokens + excluded.output_tokens, "
    "cost_usd = usage.cost_usd + excluded.cost_usd"
)


class PostgresSpend(PostgresConnection, SpendStore):
    async def reserve_spend(self, reservation: Reservation) -> None:
        r = reservation
        values = {
            "id": r.reservation_id,
            "tenant": r.tenant,
            "day": r.day,
            "judge": r.judge,
            "owner": r.owner,
            **dataclasses.asdict(r.spend),
            "lock": SPEND_LOCK,
        }
        # Most tenants have no daily limit: one statement holds their spend, and takes no lock.
        held = await self._fetchone(
            f"{_HOLD} SELECT {_HELD_VALUES} WHERE NOT EXISTS (SELECT 1 FROM tenants "
            f"WHERE tenant = %(tenant)s AND {_DAILY_LIMITED}) RETURNING 1",
            values,
        )
        if held is not None:
            return
        async with self._transaction() as conn:
            # The lock in a statement of its own: the next one's snapshot, taken after it, sees
            # every reservation committed by whoever held the lock before.
            await conn.execute(
                "SELECT pg_advisory_xact_lock(%(lock)s, hashtext(%(tenant)s))", values
            )
            cursor = await conn.execute(
                "SELECT daily_judge_calls, daily_input_tokens, daily_cost_usd, settled.*, held.* "
                f"FROM tenants, ({_sums('usage')}) settled, ({_sums('reservations')}) held "
                "WHERE tenant = %(tenant)s",
                values,
            )
            row = await cursor.fetchone()
            if row is not None:
                spent = plus(plus(spend_from_row(row[3:7]), spend_from_row(row[7:11])), r.spend)
                check_daily_limits(row[:3], spent)
            await conn.execute(f"{_HOLD} VALUES ({_HELD_VALUES})", values)

    async def settle_spend(self, reservation_id: str, actual: Spend) -> None:
        await self._execute(
            "WITH released AS (DELETE FROM reservations WHERE reservation_id = %s "
            "RETURNING tenant, day, judge) "
            "INSERT INTO usage (tenant, day, judge, calls, input_tokens, output_tokens, cost_usd) "
            f"SELECT tenant, day, judge, %s, %s, %s, %s FROM released {ADD_USAGE}",
            (reservation_id, *dataclasses.astuple(actual)),
        )

    async def usage(self, tenant: str, day: str) -> UsageReport:
        # One statement, hence one snapshot: a settle moving spend from `reserved` to `today`
        # meanwhile is counted exactly once.
        rows = await self._fetchall(
            "SELECT 'today', judge, calls, input_tokens, output_tokens, cost_usd FROM usage "
            "WHERE tenant = %(tenant)s AND day = %(day)s "
            "UNION ALL SELECT 'total', judge, SUM(calls)::bigint, SUM(input_tokens)::bigint, "
            "SUM(output_tokens)::bigint, SUM(cost_usd) FROM usage WHERE tenant = %(tenant)s "
            "GROUP BY judge "
            f"UNION ALL SELECT 'reserved', '', * FROM ({_sums('reservations')}) held "
            "UNION ALL SELECT 'unfinished', '', COUNT(*), 0, 0, 0 FROM jobs "
            f"WHERE tenant = %(tenant)s AND {UNFINISHED_JOBS}",
            {"tenant": tenant, "day": day},
        )
        today: dict[str, Spend] = {}
        total: dict[str, Spend] = {}
        reserved, unfinished = Spend(), 0
        for part, judge, *spend in sorted(rows):
            if part == "today":
                today[judge] = spend_from_row(spend)
            elif part == "total":
                total[judge] = spend_from_row(spend)
            elif part == "reserved":
                reserved = spend_from_row(spend)
            else:
                unfinished = spend[0]
        return UsageReport(today, total, reserved, unfinished)
