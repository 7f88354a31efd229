"""gRPC health follows the database: NOT_SERVING while it does not answer, SERVING again as
soon as it does, without a restart. Load balancers and Kubernetes readiness then send calls
only to replicas that can serve them."""

from __future__ import annotations

from collections.abc import Sequence

import anyio
import structlog
from grpc_health.v1 import health, health_pb2

from tierank.server.errors import StorageError
from tierank.server.storage.base import Database

# How often the database is asked, and how long one answer may take.
CHECK_INTERVAL_S = 1.0
CHECK_TIMEOUT_S = 2.0


async def follow_database(
    storage: Database, servicer: health.aio.HealthServicer, services: Sequence[str]
) -> None:
    """Run until cancelled; the services start SERVING (the caller set them)."""
    log = structlog.get_logger()
    serving = True
    while True:
        await anyio.sleep(CHECK_INTERVAL_S)
        reason = None
        with anyio.move_on_after(CHECK_TIMEOUT_S) as timeout:
            try:
                await storage.ping()
            except StorageError as error:
                reason = str(error)
        if timeout.cancelled_caught:
            reason = f"the database did not answer within {CHECK_TIMEOUT_S:g} s"
        if (reason is None) == serving:
            continue
        serving = reason is None
        if serving:
            log.info("the database answers again: serving")
        else:
            log.error("the database is unreachable: not serving", error=reason)
        status = (
            health_pb2.HealthCheckResponse.SERVING
            if serving
            else health_pb2.HealthCheckResponse.NOT_SERVING
        )
        for service in services:
            await servicer.set(service, status)
