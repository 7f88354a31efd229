"""Reserve-then-settle for a tenant's daily spend.

Before a judge call is sent, its worst case (one call, the judge's upper estimate of input
tokens and cost) is reserved against the tenant's daily limits in one storage transaction;
when the call ends it is settled at what the provider reported. Concurrent calls of one tenant
therefore see each other's reservations and can never overshoot a limit together. A call that
is abandoned mid-flight (a cancel, a deadline) is settled at its reservation: the provider may
have charged for it.
"""

from __future__ import annotations

import datetime
import secrets
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

import anyio

from tierank.server.judges.base import FailureKind, JudgeFailure, JudgeUsage
from tierank.server.storage.base import Reservation, Spend, Storage


def utc_day(at: datetime.datetime | None = None) -> str:
    moment = at or datetime.datetime.now(datetime.UTC)
    return moment.strftime("%Y-%m-%d")


def spend_of(usage: JudgeUsage, failure: JudgeFailure | None = None) -> Spend:
    """What a call spent; one refused without a request (an open breaker) is no call."""
    refused = failure is not None and failure.kind == FailureKind.UNAVAILABLE
    return Spend(
        calls=0 if refused else 1,
        input_tokens=usage.input_tokens,
        output_tokens=usage.output_tokens,
        cost_usd=usage.cost_usd,
    )


@dataclass
class Bill:
    """What a held call spent, filled in by the caller once known (None: unknown)."""

    spent: Spend | None = None


class SpendLedger:
    def __init__(self, storage: Storage, replica: str) -> None:
        """`replica` owns the reservations this ledger makes (see Storage.heartbeat)."""
        self._storage = storage
        self._replica = replica

    async def reserve(self, tenant: str, judge: str, worst_case: JudgeUsage) -> Reservation:
        """Hold a call's worst case; raises QuotaExceeded (holding nothing) past a limit."""
        reservation = Reservation(
            reservation_id=secrets.token_hex(8),
            tenant=tenant,
            day=utc_day(),
            judge=judge,
            spend=spend_of(worst_case),
            owner=self._replica,
        )
        await self._storage.reserve_spend(reservation)
        return reservation

    async def settle(self, reservation: Reservation, actual: Spend | None) -> None:
        """Settle at `actual`, or at the reservation when what was spent is unknown."""
        await self._storage.settle_spend(
            reservation.reservation_id, reservation.spend if actual is None else actual
        )

    @asynccontextmanager
    async def held(self, tenant: str, judge: str, worst_case: JudgeUsage) -> AsyncIterator[Bill]:
        """Reserve a call's worst case for the block (QuotaExceeded before it, past a limit),
        then settle at the bill, or at the reservation if the block ended without one."""
        reservation = await self.reserve(tenant, judge, worst_case)
        bill = Bill()
        try:
            yield bill
        finally:
            # Shielded: a call cancelled mid-flight is still settled (at its reservation).
            with anyio.CancelScope(shield=True):
                await self.settle(reservation, bill.spent)
