"""Assembles and runs the gRPC server: RankService, EvalService, AdminService, health checking
and (optionally) reflection, behind one interceptor that authenticates every call."""

from __future__ import annotations

import asyncio
import errno
import ipaddress
import socket
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import anyio
import grpc
import structlog
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from tierank.addresses import parse_address, resolve
from tierank.server import metrics
from tierank.server.database_health import follow_database
from tierank.server.jobs.hub import EventHub
from tierank.server.jobs.manager import JobManager
from tierank.server.jobs.operations import OperationManager
from tierank.server.jobs.replica import Replica, new_replica_id
from tierank.server.jobs.steps import TenantActivity
from tierank.server.judges.registry import JudgeFactory
from tierank.server.judges.settings import JudgeSettings
from tierank.server.observability.rpc import TracingInterceptor
from tierank.server.observability.tracing import tracing
from tierank.server.rpc.admin_service import ADMIN_SERVICE, AdminServicer
from tierank.server.rpc.auth import AUTH_NONE, Authenticator
from tierank.server.rpc.eval_service import EVAL_SERVICE, EvalServicer
from tierank.server.rpc.interceptor import EdgeInterceptor
from tierank.server.rpc.rank_service import RankServicer
from tierank.server.rpc.reflection import REFLECTION_SERVICES, enable_reflection
from tierank.server.rpc.revocation import StreamCredentials
from tierank.server.rpc.study_service import STUDY_SERVICE, StudyServicer
from tierank.server.rpc.tls import server_credentials
from tierank.server.settings import ServerSettings
from tierank.server.storage.base import KeyStore, StudyRecord
from tierank.server.storage.by_url import open_storage, shown
from tierank.server.studies.driver import StudyDriver
from tierank.server.studies.grading import StudyGrading
from tierank.server.studies.report import build_report
from tierank.server.tenancy.provider_accounts import ProviderAccounts
from tierank.server.tenancy.sealing import Sealer
from tierank.server.tenancy.spending import SpendLedger
from tierank.v1 import (
    admin_pb2_grpc,
    eval_pb2_grpc,
    rank_pb2,
    rank_pb2_grpc,
    study_pb2,
    study_pb2_grpc,
)

RANK_SERVICE = rank_pb2.DESCRIPTOR.services_by_name["RankService"].full_name
SERVICES = (RANK_SERVICE, EVAL_SERVICE, ADMIN_SERVICE, STUDY_SERVICE)
# Watch streams are resumable, so on shutdown they get only a moment to finish.
_STREAM_GRACE_S = 1.0


class ListenError(Exception):
    """The server cannot listen on the address it was given (taken, or not this host's)."""


class UnsafeSettings(Exception):
    """Settings that would expose the server; the message says what to change."""


def is_loopback(address: str) -> bool:
    host = address.rpartition(":")[0].strip("[]")
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:  # a host name other than localhost, or empty (every interface)
        return False


def check_exposure(settings: ServerSettings) -> None:
    """Refuse to serve without authentication on an address others can reach, unless told."""
    if settings.auth != AUTH_NONE or settings.allow_unauthenticated:
        return
    if not is_loopback(settings.listen):
        raise UnsafeSettings(
            f"refusing to serve {settings.listen} without authentication: anyone who reaches it "
            "could read every job and spend the provider keys. Serve with --auth keys (make "
            "the first operator key with `tierank tenants set NAME --db FILE` and `tierank "
            "keys create --db FILE --tenant NAME --role operator`), listen on 127.0.0.1, or "
            "pass --allow-unauthenticated"
        )


def _grpc_server(
    settings: ServerSettings,
    keys: KeyStore,
    streams: StreamCredentials,
    activity: TenantActivity,
) -> grpc.aio.Server:
    authenticator = Authenticator(keys, settings.auth)
    # Health is left out: load balancers probe it without keys.
    authenticated = (*SERVICES, *REFLECTION_SERVICES)
    return grpc.aio.server(
        interceptors=[
            TracingInterceptor(SERVICES),  # outermost: the span covers authentication too
            EdgeInterceptor(
                settings.max_message_bytes, authenticated, authenticator, streams, activity
            ),
        ],
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


def _listen(
    server: grpc.aio.Server, address: str, credentials: grpc.ServerCredentials | None
) -> int:
    try:
        if credentials is None:
            return server.add_insecure_port(address)
        return server.add_secure_port(address, credentials)
    except RuntimeError:
        raise ListenError(f"cannot listen on {address}: gRPC could not bind it") from None


def _check_free(address: str) -> None:
    """Resolve the address and bind it once ourselves, so that an unknown host or a taken port
    is reported in one plain line (gRPC would log a multi-line core error first)."""
    try:
        parsed = parse_address(address, listening=True)
    except ValueError as error:
        raise ListenError(f"cannot listen on {error}") from None
    try:
        infos = resolve(parsed)
    except ValueError as error:
        raise ListenError(f"cannot listen on {address}: {error}") from None
    if parsed.port == 0:
        return
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


def _expose_metrics(listen: str) -> str:
    """Serve metrics on `listen` if set; returns the bound host:port, or "" when off."""
    if not listen:
        return ""
    try:
        return metrics.expose(listen)
    except OSError as error:
        raise ListenError(f"cannot serve metrics on {listen}: {error.strerror or error}") from None


async def serve(
    settings: ServerSettings,
    stop: anyio.Event,
    on_ready: Callable[[str], object] | None = None,
) -> None:
    """Serve until `stop` is set, then drain: NOT_SERVING, calls in flight land, streams end.

    `on_ready` is called with the bound host:port once the server accepts calls.
    """
    log = structlog.get_logger()
    # An address that cannot be listened on is reported as such, before any other complaint
    # about it (a host name that does not resolve is no reason to talk of authentication).
    _check_free(settings.listen)
    if settings.metrics_listen:
        _check_free(settings.metrics_listen)
    check_exposure(settings)
    credentials = server_credentials(settings.tls_cert, settings.tls_key, settings.tls_client_ca)
    sealer = Sealer.from_environment()
    # A broken judges config or a taken address (above) is found before the database is
    # opened, and jobs resume only once the server is bound: a server that cannot serve never
    # runs a job.
    judge_settings = JudgeSettings.load(config_path=settings.judges_config)
    storage = await open_storage(
        settings.db, sqlite_synchronous=settings.sqlite_synchronous, pool=settings.pool
    )
    factory: JudgeFactory | None = None
    try:
        streams = StreamCredentials(storage)
        activity = TenantActivity()  # the RPC edge tells the job steps' thread (steps.py)
        server = _grpc_server(settings, storage, streams, activity)
        port = _listen(server, settings.listen, credentials)
        factory = JudgeFactory(judge_settings)
        replica = Replica(new_replica_id(), settings.lease_s, takes_free_jobs=settings.resume_jobs)
        log = log.bind(replica=replica.replica_id)
        # Where other replicas write too, a watcher looks at storage now and then in case a
        # notification of theirs was lost.
        hub = EventHub(poll_s=replica.tick_s if storage.shared else None)
        health_servicer = health.aio.HealthServicer()
        accounts = ProviderAccounts(storage, sealer)
        spending = SpendLedger(storage, replica.replica_id)
        async with (
            tracing(settings.otlp_endpoint, settings.trace_content, replica.replica_id),
            metrics.UNFINISHED.counting(storage.unfinished_counts),
            JobManager(storage, factory, hub, accounts, spending, replica, activity) as manager,
            OperationManager(storage, replica) as operations,
        ):
            rank_pb2_grpc.add_RankServiceServicer_to_server(
                RankServicer(
                    manager,
                    storage,
                    hub,
                    replica=replica.replica_id,
                    max_message_bytes=settings.max_message_bytes,
                ),
                server,
            )
            eval_pb2_grpc.add_EvalServiceServicer_to_server(
                EvalServicer(storage, factory, accounts, spending, operations), server
            )
            admin_pb2_grpc.add_AdminServiceServicer_to_server(
                AdminServicer(storage, sealer), server
            )

            async def final_report(record: StudyRecord, progress: study_pb2.StudyProgress) -> bytes:
                return (await build_report(storage, record, progress)).SerializeToString()

            grading = StudyGrading(storage, factory, accounts, spending)
            studies = StudyDriver(
                storage,
                manager,
                grading,
                replica.replica_id,
                final_report,
                settings.lease_s,
                drives_all=settings.resume_jobs,
            )
            study_pb2_grpc.add_StudyServiceServicer_to_server(
                StudyServicer(storage, manager, studies, grading, replica.replica_id), server
            )
            health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
            if settings.serves_reflection:
                enable_reflection([*SERVICES, health.SERVICE_NAME], server)
            await server.start()
            served = ("", *SERVICES)
            for service in served:
                await health_servicer.set(service, health_pb2.HealthCheckResponse.SERVING)
            # Health follows the database until the shutdown, NOT_SERVING from then on; open
            # streams follow their keys' revocation.
            async with anyio.create_task_group() as following:
                following.start_soon(follow_database, storage, health_servicer, served)
                following.start_soon(streams.run)
                following.start_soon(studies.run)
                address = f"{settings.listen.rpartition(':')[0]}:{port}"
                metrics_address = _expose_metrics(settings.metrics_listen)
                storage.announce(address)
                if settings.ready_file:
                    # The gRPC address first, alone on its line: scripts read it with cat.
                    lines = [address, metrics_address] if metrics_address else [address]
                    settings.ready_file.write_text("\n".join(lines) + "\n")
                if on_ready is not None:
                    on_ready(address)
                log.info(
                    "serving",
                    address=address,
                    metrics_address=metrics_address or None,
                    db=shown(settings.db),
                    auth=settings.auth,
                    tls="mutual" if settings.tls_client_ca else ("on" if credentials else "off"),
                    reflection=settings.serves_reflection,
                )
                await stop.wait()
                following.cancel_scope.cancel()
            log.info("shutting down", active_jobs=manager.active_jobs)
            for service in served:
                await health_servicer.set(service, health_pb2.HealthCheckResponse.NOT_SERVING)
            async with anyio.create_task_group() as draining:
                draining.start_soon(manager.drain, settings.shutdown_grace_s)
                draining.start_soon(operations.drain, settings.shutdown_grace_s)
            await server.stop(_STREAM_GRACE_S)
    finally:
        if factory is not None:
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
        started: set[asyncio.Future[Any]] = {task, bound}
        await asyncio.wait(started, return_when=asyncio.FIRST_COMPLETED)
        if not bound.done():
            task.result()  # start-up failed: raise its error
        yield bound.result()
    finally:
        stop.set()
        await task
