"""Assembles and runs the gRPC server: RankService, health checking and reflection."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

import anyio
import grpc
import structlog
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from tierank.server import metrics
from tierank.server.eval_service import EVAL_SERVICE, EvalServicer
from tierank.server.hub import EventHub
from tierank.server.jobs import JobManager
from tierank.server.judges.registry import JudgeFactory
from tierank.server.judges.settings import JudgeSettings
from tierank.server.servicer import RankServicer
from tierank.server.settings import ServerSettings
from tierank.server.storage.sqlite import SqliteStorage
from tierank.v1 import eval_pb2_grpc, rank_pb2, rank_pb2_grpc

RANK_SERVICE = rank_pb2.DESCRIPTOR.services_by_name["RankService"].full_name
# Watch streams are resumable, so on shutdown they get only a moment to finish.
_STREAM_GRACE_S = 1.0


async def serve(
    settings: ServerSettings,
    stop: anyio.Event,
    on_ready: Callable[[str], object] | None = None,
) -> None:
    """Serve until `stop` is set, then drain: NOT_SERVING, calls in flight land, streams end.

    `on_ready` is called with the bound host:port once the server accepts calls.
    """
    log = structlog.get_logger()
    storage = SqliteStorage(settings.db, settings.sqlite_synchronous)
    factory = JudgeFactory(JudgeSettings.load(config_path=settings.judges_config))
    hub = EventHub()
    server = grpc.aio.server(
        options=[
            ("grpc.max_receive_message_length", settings.max_message_bytes),
            ("grpc.max_send_message_length", settings.max_message_bytes),
        ]
    )
    health_servicer = health.aio.HealthServicer()
    try:
        async with JobManager(storage, factory, hub) as manager:
            rank_pb2_grpc.add_RankServiceServicer_to_server(
                RankServicer(manager, storage, hub), server
            )
            eval_pb2_grpc.add_EvalServiceServicer_to_server(EvalServicer(storage, factory), server)
            health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
            reflection.enable_server_reflection(
                [RANK_SERVICE, EVAL_SERVICE, health.SERVICE_NAME, reflection.SERVICE_NAME], server
            )
            port = server.add_insecure_port(settings.listen)
            await server.start()
            for service in ("", RANK_SERVICE):
                await health_servicer.set(service, health_pb2.HealthCheckResponse.SERVING)
            address = f"{settings.listen.rpartition(':')[0]}:{port}"
            if settings.metrics_listen:
                metrics.expose(settings.metrics_listen)
            if settings.ready_file:
                settings.ready_file.write_text(address)
            if on_ready is not None:
                on_ready(address)
            log.info("serving", address=address, db=str(settings.db))
            await stop.wait()
            log.info("shutting down", active_jobs=manager.active_jobs)
            for service in ("", RANK_SERVICE):
                await health_servicer.set(service, health_pb2.HealthCheckResponse.NOT_SERVING)
            await manager.drain(settings.shutdown_grace_s)
            await server.stop(_STREAM_GRACE_S)
    finally:
        await factory.aclose()
        await storage.close()
        log.info("stopped")


@asynccontextmanager
async def background_server(settings: ServerSettings) -> AsyncIterator[str]:
    """Serve inside the caller's event loop for the duration of the block (tests, benchmarks,
    embedding); yields the bound host:port and drains the server on the way out."""
    stop = anyio.Event()
    bound: asyncio.Future[str] = asyncio.get_running_loop().create_future()
    task = asyncio.create_task(serve(settings, stop, on_ready=bound.set_result))
    try:
        await asyncio.wait({task, bound}, return_when=asyncio.FIRST_COMPLETED)
        if not bound.done():
            task.result()  # start-up failed: raise its error
        yield bound.result()
    finally:
        stop.set()
        await task
