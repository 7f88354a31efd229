"""Leases, cancellation requests and watch streams of SQLite storage, in memory: the file lock
makes this process the database's only server, so every lease in the file's past belonged to
a process that is gone.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence

import structlog

from tierank.resources import FINAL_JOB_STATES
from tierank.server.errors import QuotaExceeded
from tierank.server.storage.base import (
    Claim,
    JobRecord,
    Lease,
    LeaseStore,
    Membership,
    WatcherStore,
)
from tierank.server.storage.rules import UNFINISHED_JOBS
from tierank.server.storage.sqlite.connection import SqliteState
from tierank.server.storage.sqlite.jobs import JOB_COLUMNS, job_from_row, read_job, read_unfinished
from tierank.server.storage.sqlite.spend import add_usage


class SqliteLeases(SqliteState, LeaseStore):
    async def heartbeat(self, replica: str, ttl_s: float, draining: bool = False) -> Membership:
        if not self._orphans_settled:
            released = await self._settle_orphans()
            self._orphans_settled = True
            if released:
                # Calls in flight when the last server stopped may have been paid for.
                structlog.get_logger().info(
                    "settled reservations left by the last run", count=released
                )
        (unfinished,) = await self._reader.submit(
            lambda conn: conn.execute(
                f"SELECT COUNT(*) FROM jobs WHERE {UNFINISHED_JOBS}"
            ).fetchone()
        )
        return Membership(live_replicas=0 if draining else 1, unfinished_jobs=unfinished)

    async def _settle_orphans(self) -> int:
        def write(conn: sqlite3.Connection) -> int:
            rows = conn.execute(
                "SELECT tenant, day, judge, calls, input_tokens, output_tokens, cost_usd "
                "FROM reservations"
            ).fetchall()
            # Nothing open is the usual start, and it must work on a full disk: no write then.
            if rows:
                add_usage(conn, rows)
                conn.execute("DELETE FROM reservations")
            return len(rows)

        return await self._writer.submit(write)

    async def leave(self, replica: str) -> None:
        self._leases.clear()

    async def claim_jobs(self, owner: str, lease_s: float, limit: int) -> list[Claim]:
        free = [
            job
            for job in await self._reader.submit(read_unfinished)
            if job.job_id not in self._leases
        ]
        return [self._claim(job, owner) for job in free[: max(limit, 0)]]

    async def claim_job(self, job_id: str, owner: str, lease_s: float) -> Claim | None:
        if job_id in self._leases:
            return None

        def read(conn: sqlite3.Connection) -> JobRecord | None:
            row = conn.execute(
                f"SELECT {JOB_COLUMNS} FROM jobs WHERE job_id = ? AND {UNFINISHED_JOBS}", (job_id,)
            ).fetchone()
            return job_from_row(row) if row else None

        job = await self._reader.submit(read)
        return None if job is None or job_id in self._leases else self._claim(job, owner)

    def _claim(self, job: JobRecord, owner: str) -> Claim:
        epoch = next(self._epochs)
        self._leases[job.job_id] = epoch
        return Claim(job, Lease(job.job_id, owner, epoch), job.job_id in self._cancel_requested)

    async def renew_leases(self, leases: Sequence[Lease], lease_s: float) -> dict[str, bool]:
        return {
            lease.job_id: lease.job_id in self._cancel_requested
            for lease in leases
            if self._leases.get(lease.job_id) == lease.epoch
        }

    async def release_lease(self, lease: Lease) -> None:
        if self._leases.get(lease.job_id) == lease.epoch:
            del self._leases[lease.job_id]

    async def request_cancel(self, tenant: str, job_id: str) -> bool:
        job = await self._reader.submit(lambda conn: read_job(conn, tenant, job_id))
        if job is None or job.state in FINAL_JOB_STATES:
            return False
        self._cancel_requested.add(job_id)
        return True


class SqliteWatchers(SqliteState, WatcherStore):
    async def hold_watcher(self, watch_id: str, replica: str, tenant: str, limit: int) -> None:
        if sum(held == tenant for held in self._watchers.values()) >= limit:
            raise QuotaExceeded("max_watchers", limit)
        self._watchers[watch_id] = tenant

    async def release_watcher(self, watch_id: str) -> None:
        self._watchers.pop(watch_id, None)
