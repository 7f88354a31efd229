"""The one place where a tierank RPC's request is read and its failures become a status.

Server reflection passes here too, for authentication only: what it shows helps an attacker,
so with --auth keys it needs a key like any tierank RPC. Health checking does not: load
balancers probe it without keys.

Each unary and server-streaming method of the tierank services is re-wrapped so that gRPC hands
it the request as raw bytes. That lets the server:

- answer a request over --max-message-mb with RESOURCE_EXHAUSTED naming the limit and how to
  raise it (gRPC's own check, with its bare message, only applies past a higher ceiling);
- answer bytes that are not a valid message (garbage, truncated, invalid UTF-8, nesting too
  deep) with INVALID_ARGUMENT rather than UNKNOWN and a protobuf class name;
- authenticate the caller (server/rpc/auth.py) before anything else, and keep it for the call;
- end a stream whose key is revoked while it is open (server/rpc/revocation.py);
- bind the rpc name, the caller's tenant and a request id to every log line of the call;
- keep a unary request's bytes for the call (request_bytes), for a servicer that stores a
  request whole;
- turn every failure into its status (server/rpc/statuses.py): the server's errors into their
  rich statuses, any other exception into INTERNAL with the request id, never a class name or
  a traceback.
"""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import aclosing, asynccontextmanager
from contextvars import ContextVar
from typing import Any

import grpc
import structlog
from google.protobuf.message import DecodeError

from tierank.server.errors import FieldViolation, InvalidInput, ResourceExhausted
from tierank.server.jobs.steps import TenantActivity
from tierank.server.observability.rpc import rewrapped
from tierank.server.rpc.auth import Authenticator, current_caller, set_caller
from tierank.server.rpc.revocation import StreamCredentials
from tierank.server.rpc.statuses import abort, status_of

_REQUEST_ID_HEADER = "x-request-id"
_REQUEST_BYTES: ContextVar[bytes] = ContextVar("tierank_request_bytes")


def request_bytes() -> bytes:
    """The request of the unary RPC being served, as its client sent it (set by the interceptor
    for every unary call). A servicer that stores a request whole stores these rather than
    serialize again what was just parsed: for a chunk of study inputs that is tens of
    milliseconds a few MiB, in one piece that holds the event loop (and the interpreter's lock)."""
    return _REQUEST_BYTES.get()


class EdgeInterceptor(grpc.aio.ServerInterceptor):
    def __init__(
        self,
        max_message_bytes: int,
        services: tuple[str, ...],
        authenticator: Authenticator,
        streams: StreamCredentials,
        activity: TenantActivity,
    ) -> None:
        """`activity` is told each authenticated call's tenant."""
        self._max_message_bytes = max_message_bytes
        self._prefixes = tuple(f"/{service}/" for service in services)
        self._authenticator = authenticator
        self._streams = streams
        self._activity = activity

    async def intercept_service(
        self,
        continuation: Callable[
            [grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler[Any, Any] | None]
        ],
        details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler[Any, Any] | None:
        handler = await continuation(details)
        method = details.method
        if handler is None or not method.startswith(self._prefixes):
            return handler
        assert handler.request_deserializer is not None, "generated handlers deserialize"
        call = _Call(
            method,
            self._max_message_bytes,
            handler.request_deserializer,
            details,
            self._authenticator,
            self._streams,
            self._activity,
        )
        return rewrapped(handler, call, deserializes=True)


class _Call:
    def __init__(
        self,
        method: str,
        max_message_bytes: int,
        deserialize: Callable[[bytes], Any],
        details: grpc.HandlerCallDetails,
        authenticator: Authenticator,
        streams: StreamCredentials,
        activity: TenantActivity,
    ) -> None:
        self._rpc = method.rpartition("/")[2]
        self._max_message_bytes = max_message_bytes
        self._deserialize = deserialize
        self._authenticator = authenticator
        self._streams = streams
        self._activity = activity
        self._metadata: tuple[tuple[str, str | bytes], ...] = tuple(
            details.invocation_metadata or ()
        )
        # A client's own id, when it sends one, ties its logs to ours; cut so it cannot bloat them.
        given = next(
            (v for k, v in self._metadata if k == _REQUEST_ID_HEADER and isinstance(v, str)), ""
        )[:64]
        self.request_id = given or secrets.token_hex(8)

    @asynccontextmanager
    async def _guard(self, context: grpc.aio.ServicerContext) -> AsyncIterator[None]:
        """The call's caller and log context, and every failure in it turned into a status."""
        with structlog.contextvars.bound_contextvars(rpc=self._rpc, request_id=self.request_id):
            try:
                caller = await self._authenticator.caller(self._rpc, self._metadata, context)
                set_caller(caller)
                self._activity.saw(caller.tenant)
                with structlog.contextvars.bound_contextvars(tenant=caller.tenant):
                    yield
            except grpc.aio.AbortError:
                raise  # aborted already, with its own status
            except Exception as error:  # every failure becomes a status
                await abort(context, status_of(error, f"request id {self.request_id}"))

    def unary(self, behaviour: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
        async def handle(raw: bytes, context: grpc.aio.ServicerContext) -> Any:
            async with self._guard(context):
                request = self._parse(raw)
                _REQUEST_BYTES.set(raw)
                return await behaviour(request, context)

        return handle

    def stream(
        self, behaviour: Callable[..., AsyncIterator[Any]]
    ) -> Callable[..., AsyncIterator[Any]]:
        async def handle(raw: bytes, context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
            async with self._guard(context):
                async for response in self._until_revoked(behaviour(self._parse(raw), context)):
                    yield response

        return handle

    def bidi(
        self, behaviour: Callable[..., AsyncIterator[Any]]
    ) -> Callable[..., AsyncIterator[Any]]:
        async def handle(
            requests: AsyncIterator[Any], context: grpc.aio.ServicerContext
        ) -> AsyncIterator[Any]:
            async with self._guard(context):
                async for response in self._until_revoked(behaviour(requests, context)):
                    yield response

        return handle

    async def _until_revoked(self, responses: AsyncIterator[Any]) -> AsyncIterator[Any]:
        """The responses, until the caller's key is revoked (then KEY_REVOKED)."""
        caller = current_caller()
        async with aclosing(responses):  # type: ignore[type-var]
            if not caller.key_id:
                # A server without authentication has no key to revoke: no watch per response.
                async for response in responses:
                    yield response
                return
            with self._streams.watching(caller, self._rpc) as stream:
                while True:
                    try:
                        response = await stream.next_of(responses)
                    except StopAsyncIteration:
                        return
                    yield response

    def _parse(self, raw: bytes) -> Any:
        if len(raw) > self._max_message_bytes:
            limit_mb = self._max_message_bytes // (1024 * 1024)
            raise ResourceExhausted(
                f"the request is {len(raw)} bytes, more than this server's limit of "
                f"{self._max_message_bytes} bytes ({limit_mb} MiB); the server's operator can "
                "raise it with --max-message-mb or TIERANK_MAX_MESSAGE_MB",
                "REQUEST_TOO_LARGE",
                limit_bytes=str(self._max_message_bytes),
                request_bytes=str(len(raw)),
            )
        try:
            return self._deserialize(raw)
        except (DecodeError, RecursionError, ValueError):
            raise InvalidInput(
                [
                    FieldViolation(
                        "request",
                        f"is not a valid {self._rpc} request message (malformed protobuf bytes, "
                        "a string that is not UTF-8, or nesting too deep)",
                    )
                ]
            ) from None
