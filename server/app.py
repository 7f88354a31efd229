"""Assembles and runs the gRPC server: RankService, health checking and reflection."""

from __future__ import annotations

import asyncio
import errno
import socket
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

import anyio
import grpc
import structlog
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from tierank.server import metrics
from tierank.server.eval_service import EVAL_SERVICE, EvalServicer
from tierank.server.hub import EventHub
from tierank.server.interceptor import EdgeInterceptor
from tierank.server.jobs import JobManager
from tierank.server.judges.registry import JudgeFactory
from tierank.server.judges.settings import JudgeSettings
from tierank.server.reflection import enable_reflection
from tierank.server.servicer import RankServicer
from tierank.server.settings import ServerSettings
from tierank.server.storage.sqlite import SqliteStorage
from tierank.v1 import eval_pb2_grpc, rank_pb2, rank_pb2_grpc

RANK_SERVICE = rank_pb2.DESCRIPTOR.services_by_name["RankService"].full_name
SERVICES = (RANK_SERVICE, EVAL_SERVICE)
# Watch streams are resumable, so on shutdown they get only a moment to finish.
_STREAM_GRACE_S = 1.0


class ListenError(Exception):
    """The server cannot listen on the address it was given (taken, or not this host's)."""


def _grpc_server(settings: ServerSettings) -> grpc.aio.Server:
    return grpc.aio.server(
        interceptors=[EdgeInterceptor(settings.max_message_bytes, SERVICES)],
        options=[
            # Above the API's limit, so that the interceptor can answer requests between the two
            # with a status naming the limit and the flag (see settings.transport_limit_bytes).
            ("grpc.max_receive_message_length", settings.transport_limit_bytes),
            ("grpc.max_send_message_length", settings.max_message_bytes),
            # grpc enables SO_REUSEPORT on Linux: a second server on a taken port would then
            # "start" beside the first and split the connections between two databases.
            ("grpc.so_reuseport", 0),
        ],
    )


def _listen(server: grpc.aio.Server, address: str) -> int:
    _check_free(address)
    try:
        return server.add_insecure_port(address)
    except RuntimeError:
        raise ListenError(f"cannot listen on {address}: gRPC could not bind it") from None


def _check_free(address: str) -> None:
    """Bind the address once ourselves, so that a taken one is reported in one plain line
    (gRPC would log a multi-line core error first)."""
    host, _, port = address.rpartition(":")
    host = host.strip("[]")
    try:
        if int(port) == 0:
            return
        infos = socket.getaddrinfo(host or None, int(port), type=socket.SOCK_STREAM)
    except (ValueError, OSError) as error:
        raise ListenError(f"cannot listen on {address}: {error}") from None
    for family, kind, proto, _, sockaddr in infos:
        with socket.socket(family, kind, proto) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                probe.bind(sockaddr)
            except OSError as error:
                reason = (
                    "the address is in use by another process"
                    if error.errno == errno.EADDRINUSE
                    else error.strerror or "it cannot be bound"
                )
                raise ListenError(f"cannot listen on {address}: {reason}") from None


async def serve(
    settings: ServerSettings,
    stop: anyio.Event,
    on_ready: Callable[[str], object] | None = None,
) -> None:
    """Serve until `stop` is set, then drain: NOT_SERVING, calls in flight land, streams end.

    `on_ready` is called with the bound host:port once the server accepts calls.
    """
    log = structlog.get_logger()
    server = _grpc_server(settings)
    # Bound before the database is opened: a server that cannot serve must not touch its
    # database, let alone resume jobs.
    port = _listen(server, settings.listen)
    storage = SqliteStorage(settings.db, settings.sqlite_synchronous)
    factory = JudgeFactory(JudgeSettings.load(config_path=settings.judges_config))
    hub = EventHub()
    health_servicer = health.aio.HealthServicer()
    try:
        async with JobManager(
            storage, factory, hub, max_message_bytes=settings.max_message_bytes
        ) as manager:
            rank_pb2_grpc.add_RankServiceServicer_to_server(
                RankServicer(manager, storage, hub, max_message_bytes=settings.max_message_bytes),
                server,
            )
            eval_pb2_grpc.add_EvalServiceServicer_to_server(EvalServicer(storage, factory), server)
            health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
            enable_reflection([*SERVICES, health.SERVICE_NAME], server)
            await server.start()
            for service in ("", *SERVICES):
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
            for service in ("", *SERVICES):
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
