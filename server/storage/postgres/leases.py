"""Leases, replicas, cancellation requests, watch slots and notifications in PostgreSQL."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from typing import Any

import anyio
import psycopg
import structlog
from psycopg import sql

from tierank.server.errors import QuotaExceeded
from tierank.server.storage.base import (
    CANCEL,
    EVENTS,
    FREED,
    RESYNC,
    Change,
    Claim,
    Lease,
    LeaseStore,
    Membership,
    WatcherStore,
)
from tierank.server.storage.postgres.connection import (
    CONNECTION_OPTIONS,
    LIVE,
    NOW,
    WATCH_LOCK,
    PostgresConnection,
    plain_error,
)
from tierank.server.storage.postgres.jobs import JOB_COLUMNS, job_from_row
from tierank.server.storage.postgres.spend import ADD_USAGE
from tierank.server.storage.rules import UNFINISHED_JOBS

_CLAIMED_COLUMNS = ", ".join(
    f"jobs.{column}" for column in (*JOB_COLUMNS.split(", "), "lease_epoch", "cancel_requested")
)
# `{which}` narrows the claim to one job. SKIP LOCKED: replicas claiming at once each take
# other jobs rather than queueing behind one another's locks.
_CLAIM = f"""
WITH claimable AS (
    SELECT job_id FROM jobs WHERE {UNFINISHED_JOBS} {{which}}
    AND (lease_owner IS NULL OR lease_until < {NOW})
    ORDER BY job_id LIMIT %(limit)s FOR UPDATE SKIP LOCKED
)
UPDATE jobs SET lease_owner = %(owner)s, lease_epoch = jobs.lease_epoch + 1,
    lease_until = {NOW} + %(lease)s
FROM claimable WHERE jobs.job_id = claimable.job_id
RETURNING {_CLAIMED_COLUMNS}
"""
# A replica's heartbeat also clears up after replicas that stopped beating: their rows, their
# watch slots, and their open reservations, settled at the reserved (worst-case) spend, since
# their calls may have been paid for. One statement: one round trip a second per replica.
_HEARTBEAT = f"""
WITH me AS (
    INSERT INTO replicas (replica_id, alive_until, draining)
    VALUES (%(replica)s, {NOW} + %(ttl)s, %(draining)s)
    ON CONFLICT (replica_id) DO UPDATE
    SET alive_until = excluded.alive_until, draining = excluded.draining
),
gone AS (DELETE FROM replicas WHERE NOT ({LIVE}) AND replica_id <> %(replica)s),
unwatched AS (
    DELETE FROM watchers w WHERE w.replica_id <> %(replica)s AND NOT EXISTS
    (SELECT 1 FROM replicas r WHERE r.replica_id = w.replica_id AND r.{LIVE})
),
released AS (
    DELETE FROM reservations held WHERE held.owner <> %(replica)s AND NOT EXISTS
    (SELECT 1 FROM replicas r WHERE r.replica_id = held.owner AND r.{LIVE})
    RETURNING tenant, day, judge, calls, input_tokens, output_tokens, cost_usd
),
settled AS (
    INSERT INTO usage (tenant, day, judge, calls, input_tokens, output_tokens, cost_usd)
    SELECT tenant, day, judge, SUM(calls), SUM(input_tokens), SUM(output_tokens), SUM(cost_usd)
    FROM released GROUP BY tenant, day, judge {ADD_USAGE}
)
SELECT (NOT %(draining)s)::int + (SELECT COUNT(*) FROM replicas
        WHERE {LIVE} AND NOT draining AND replica_id <> %(replica)s),
    (SELECT COUNT(*) FROM jobs WHERE {UNFINISHED_JOBS})
"""
# After a lost connection, listening again waits this long between attempts.
_RELISTEN_S = 1.0


def _claim(owner: str, row: Sequence[Any]) -> Claim:
    job = job_from_row(row[:-2])
    return Claim(job, Lease(job.job_id, owner, row[-2]), cancel_requested=row[-1])


def _change(payload: str) -> Change | None:
    """A notification's payload, `KIND JOB_ID [SEQUENCE]`; None for one this version does not
    know (a newer replica's)."""
    kind, _, rest = payload.partition(" ")
    job_id, _, sequence = rest.partition(" ")
    if kind not in (EVENTS, CANCEL, FREED) or not job_id:
        return None
    return Change(kind, job_id, int(sequence) if sequence.isdigit() else 0)


class PostgresLeases(PostgresConnection, LeaseStore):
    async def heartbeat(self, replica: str, ttl_s: float, draining: bool = False) -> Membership:
        row = await self._fetchone(
            _HEARTBEAT, {"replica": replica, "ttl": ttl_s, "draining": draining}
        )
        return Membership(live_replicas=row[0], unfinished_jobs=row[1])

    async def leave(self, replica: str) -> None:
        await self._execute(
            "WITH gone AS (DELETE FROM replicas WHERE replica_id = %(replica)s), "
            "unwatched AS (DELETE FROM watchers WHERE replica_id = %(replica)s) SELECT 1",
            {"replica": replica},
        )

    async def claim_jobs(self, owner: str, lease_s: float, limit: int) -> list[Claim]:
        if limit <= 0:
            return []
        rows = await self._fetchall(
            _CLAIM.format(which=""), {"owner": owner, "lease": lease_s, "limit": limit}
        )
        return [_claim(owner, row) for row in rows]

    async def claim_job(self, job_id: str, owner: str, lease_s: float) -> Claim | None:
        row = await self._fetchone(
            _CLAIM.format(which="AND job_id = %(job)s"),
            {"owner": owner, "lease": lease_s, "limit": 1, "job": job_id},
        )
        return _claim(owner, row) if row else None

    async def renew_leases(self, leases: Sequence[Lease], lease_s: float) -> dict[str, bool]:
        if not leases:
            return {}
        rows = await self._fetchall(
            f"UPDATE jobs SET lease_until = {NOW} + %(lease)s "
            "FROM unnest(%(jobs)s::text[], %(epochs)s::bigint[]) AS held(job_id, epoch) "
            "WHERE jobs.job_id = held.job_id AND jobs.lease_epoch = held.epoch "
            "AND jobs.lease_owner = %(owner)s RETURNING jobs.job_id, jobs.cancel_requested",
            {
                "lease": lease_s,
                "owner": leases[0].owner,
                "jobs": [lease.job_id for lease in leases],
                "epochs": [lease.epoch for lease in leases],
            },
        )
        return dict(rows)

    async def release_lease(self, lease: Lease) -> None:
        await self._execute(
            "WITH freed AS (UPDATE jobs SET lease_owner = NULL, lease_until = 0 "
            "WHERE job_id = %(job)s AND lease_epoch = %(epoch)s "
            f"AND {UNFINISHED_JOBS} RETURNING job_id) "
            "SELECT pg_notify(%(channel)s, 'freed ' || job_id) FROM freed",
            {"job": lease.job_id, "epoch": lease.epoch, "channel": self._channel},
        )

    async def request_cancel(self, tenant: str, job_id: str) -> bool:
        row = await self._fetchone(
            "WITH marked AS (UPDATE jobs SET cancel_requested = TRUE "
            f"WHERE job_id = %(job)s AND tenant = %(tenant)s AND {UNFINISHED_JOBS} "
            "RETURNING job_id) "
            "SELECT COUNT(pg_notify(%(channel)s, 'cancel ' || job_id)) FROM marked",
            {"job": job_id, "tenant": tenant, "channel": self._channel},
        )
        return bool(row[0])

    async def changes(self) -> AsyncIterator[Change]:
        """Notifications on a connection of its own (LISTEN needs a session: see the module
        docstring), reconnecting with a pause while the database is away."""
        log = structlog.get_logger()
        while True:
            try:
                conn = await psycopg.AsyncConnection.connect(self._url, **CONNECTION_OPTIONS)
            except psycopg.Error as error:
                log.warning(
                    "cannot listen for other replicas' changes", error=str(plain_error(error))
                )
                await anyio.sleep(_RELISTEN_S)
                continue
            try:
                await conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(self._channel)))
                yield Change(RESYNC, "")
                async for notice in conn.notifies():
                    change = _change(notice.payload)
                    if change is not None:
                        yield change
            except psycopg.Error as error:
                log.warning("stopped listening for changes", error=str(plain_error(error)))
                await anyio.sleep(_RELISTEN_S)
            finally:
                with anyio.CancelScope(shield=True):
                    await conn.close()


class PostgresWatchers(PostgresConnection, WatcherStore):
    async def hold_watcher(self, watch_id: str, replica: str, tenant: str, limit: int) -> None:
        values = {
            "watch": watch_id,
            "replica": replica,
            "tenant": tenant,
            "limit": limit,
            "lock": WATCH_LOCK,
        }
        async with self._transaction() as conn:
            # The lock in a statement of its own, as in reserve_spend: the count's snapshot is
            # taken after it, so it sees every stream held by whoever held the lock before.
            await conn.execute(
                "SELECT pg_advisory_xact_lock(%(lock)s, hashtext(%(tenant)s))", values
            )
            held = await conn.execute(
                "INSERT INTO watchers (watch_id, replica_id, tenant) "
                "SELECT %(watch)s, %(replica)s, %(tenant)s WHERE (SELECT COUNT(*) FROM watchers w "
                "JOIN replicas r USING (replica_id) "
                f"WHERE w.tenant = %(tenant)s AND r.{LIVE}) < %(limit)s RETURNING 1",
                values,
            )
            if await held.fetchone() is None:
                raise QuotaExceeded("max_watchers", limit)

    async def release_watcher(self, watch_id: str) -> None:
        await self._execute("DELETE FROM watchers WHERE watch_id = %s", (watch_id,))
