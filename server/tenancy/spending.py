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

from tierank.server.judges.base import FailureKind, JudgeFailure, JudgeUsage
from tierank.server.storage.base import Reservation, Settlement, Spend, SpendStore


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


class SpendLedger:
    def __init__(self, storage: SpendStore, replica: str) -> None:
        """`replica` owns the reservations this ledger makes (see LeaseStore.heartbeat)."""
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

    async def settle(self, settlement: Settlement) -> None:
        await self._storage.settle_spend(settlement.reservation_id, settlement.actual)

    @staticmethod
    def settlement(reservation: Reservation, actual: Spend | None) -> Settlement:
        """What settles `reservation`: `actual`, or the reservation when that is unknown; for
        a write that stores the call's answer with it (JobUpdate.settlements)."""
        return Settlement(
            reservation.reservation_id, reservation.spend if actual is None else actual
        )
