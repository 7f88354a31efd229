"""A SERVER span per tierank RPC, in the trace the caller's `traceparent` names (else a new one),
current while the call runs: a job created in it belongs to that trace.

Health checks and reflection are not traced: load balancers probe health every few seconds,
and neither says anything about the work.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import contextmanager
from typing import Any, Protocol, runtime_checkable

import grpc
from opentelemetry.trace import SpanKind, Status, StatusCode

from tierank.server.observability.tracing import incoming_context, tracer, tracing_now


class TracingInterceptor(grpc.aio.ServerInterceptor):
    def __init__(self, services: tuple[str, ...]) -> None:
        self._prefixes = tuple(f"/{service}/" for service in services)

    async def intercept_service(
        self,
        continuation: Callable[
            [grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler[Any, Any] | None]
        ],
        details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler[Any, Any] | None:
        handler = await continuation(details)
        method = details.method
        if handler is None or not method.startswith(self._prefixes) or not tracing_now():
            return handler
        metadata = {
            key: value for key, value in details.invocation_metadata or () if isinstance(value, str)
        }
        return rewrapped(handler, _Traced(method, metadata), deserializes=False)


class HandlerWrapper(Protocol):
    """What a server interceptor puts around an RPC's behaviour, per kind of RPC."""

    def unary(self, behaviour: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]: ...

    def stream(
        self, behaviour: Callable[..., AsyncIterator[Any]]
    ) -> Callable[..., AsyncIterator[Any]]: ...


@runtime_checkable
class BidiWrapper(HandlerWrapper, Protocol):
    def bidi(
        self, behaviour: Callable[..., AsyncIterator[Any]]
    ) -> Callable[..., AsyncIterator[Any]]: ...


def rewrapped(
    handler: grpc.RpcMethodHandler[Any, Any], wrapper: HandlerWrapper, *, deserializes: bool
) -> grpc.RpcMethodHandler[Any, Any]:
    """`handler` with its behaviour wrapped by `wrapper`, for every interceptor alike: unary and
    server-streaming RPCs, and bidirectional ones where the wrapper has `bidi` (reflection); any
    other is left as it is. `deserializes`: the wrapper reads unary and streaming requests' bytes
    itself (to refuse a malformed one its own way), else gRPC does."""
    deserializer = None if deserializes else handler.request_deserializer
    # grpc.aio's handlers are async; the stubs type those of the threaded server.
    if handler.unary_unary is not None:
        return grpc.unary_unary_rpc_method_handler(
            wrapper.unary(handler.unary_unary),
            request_deserializer=deserializer,
            response_serializer=handler.response_serializer,
        )
    if handler.unary_stream is not None:
        return grpc.unary_stream_rpc_method_handler(
            wrapper.stream(handler.unary_stream),  # type: ignore[arg-type]
            request_deserializer=deserializer,
            response_serializer=handler.response_serializer,
        )
    if handler.stream_stream is not None and isinstance(wrapper, BidiWrapper):
        return grpc.stream_stream_rpc_method_handler(
            wrapper.bidi(handler.stream_stream),  # type: ignore[arg-type]
            request_deserializer=handler.request_deserializer,
            response_serializer=handler.response_serializer,
        )
    return handler


class _Traced:
    def __init__(self, method: str, metadata: dict[str, str]) -> None:
        service, _, name = method.strip("/").partition("/")
        self._name = f"{service}/{name}"
        self._attributes = {"rpc.system": "grpc", "rpc.service": service, "rpc.method": name}
        self._metadata = metadata

    @contextmanager
    def _span(self, context: grpc.aio.ServicerContext) -> Iterator[None]:
        with tracer().start_as_current_span(
            self._name,
            context=incoming_context(self._metadata),
            kind=SpanKind.SERVER,
            attributes=self._attributes,
            # The status the call ended with is the story; a request's text stays out of spans.
            record_exception=False,
            set_status_on_exception=False,
        ) as span:
            try:
                yield
            finally:
                code = context.code() or grpc.StatusCode.OK
                span.set_attribute("rpc.grpc.status_code", code.value[0])
                if code not in _CALLER_ERRORS and code != grpc.StatusCode.OK:
                    span.set_status(Status(StatusCode.ERROR, code.name))

    def unary(self, behaviour: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
        async def handle(request: Any, context: grpc.aio.ServicerContext) -> Any:
            with self._span(context):
                return await behaviour(request, context)

        return handle

    def stream(
        self, behaviour: Callable[..., AsyncIterator[Any]]
    ) -> Callable[..., AsyncIterator[Any]]:
        async def handle(request: Any, context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
            with self._span(context):
                async for response in behaviour(request, context):
                    yield response

        return handle


# The caller's mistakes, not the server's: recorded as the status code only (as the RPC
# conventions say for a server span).
_CALLER_ERRORS = frozenset(
    {
        grpc.StatusCode.CANCELLED,
        grpc.StatusCode.INVALID_ARGUMENT,
        grpc.StatusCode.NOT_FOUND,
        grpc.StatusCode.ALREADY_EXISTS,
        grpc.StatusCode.PERMISSION_DENIED,
        grpc.StatusCode.FAILED_PRECONDITION,
        grpc.StatusCode.OUT_OF_RANGE,
        grpc.StatusCode.UNAUTHENTICATED,
        grpc.StatusCode.RESOURCE_EXHAUSTED,
    }
)
