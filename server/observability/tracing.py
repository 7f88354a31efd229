"""OpenTelemetry traces, exported over OTLP/gRPC: off unless an endpoint is configured.

One tracer provider per process, installed for the life of `serve()` (like the Prometheus
registry, it is process-wide): spans made while none is installed are the API's non-recording
spans, so a server without tracing pays one context-variable read per would-be span.

The standard OTEL_* variables apply as the SDK reads them: OTEL_EXPORTER_OTLP_(TRACES_)ENDPOINT
turns tracing on like --otlp-endpoint, OTEL_EXPORTER_OTLP_(TRACES_)HEADERS, _CERTIFICATE,
_TIMEOUT and _COMPRESSION shape the exporter, OTEL_TRACES_SAMPLER(_ARG) samples,
OTEL_BSP_* batch, OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES describe the service, and
OTEL_SDK_DISABLED=true turns tracing off whatever else is set.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Iterator, Mapping
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass

import anyio
from opentelemetry import context as otel_context
from opentelemetry import propagate, trace
from opentelemetry.sdk.resources import SERVICE_INSTANCE_ID, SERVICE_NAME, Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

SERVICE = "tierank"
_ENDPOINT_VARIABLES = ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT")
# A job's trace context is stored in W3C form whatever propagators the operator chose for
# incoming calls: it is read back by this code, on any replica, never by a client.
_STORED_FORM = TraceContextTextMapPropagator()
_TRACEPARENT = "traceparent"


@dataclass(frozen=True)
class _Installed:
    tracer: trace.Tracer
    capture_content: bool


_NOT_TRACING = _Installed(trace.NoOpTracer(), capture_content=False)
_installed = _NOT_TRACING


_CAPTURE_CONTENT_VARIABLE = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"


def tracing_configured(endpoint: str) -> bool:
    """Whether a server with --otlp-endpoint `endpoint` exports traces."""
    if os.environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    return bool(endpoint or any(os.environ.get(name) for name in _ENDPOINT_VARIABLES))


@asynccontextmanager
async def tracing(endpoint: str, capture_content: bool, replica_id: str) -> AsyncIterator[None]:
    """Export this process's spans to `endpoint` (else to where OTEL_* says) for the block,
    when tracing is configured at all; spans still buffered are sent on the way out."""
    global _installed
    if not tracing_configured(endpoint):
        yield
        return
    # Imported only here: the exporter brings its own gRPC channel code, unused without it.
    from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter

    provider = TracerProvider(resource=_resource(replica_id))
    exporter = OTLPSpanExporter(endpoint=endpoint) if endpoint else OTLPSpanExporter()
    provider.add_span_processor(BatchSpanProcessor(exporter))
    # The GenAI instrumentations' own switch for content capture is honoured too.
    capture_content = capture_content or (
        os.environ.get(_CAPTURE_CONTENT_VARIABLE, "").strip().lower() == "true"
    )
    _installed = _Installed(provider.get_tracer(SERVICE), capture_content)
    try:
        yield
    finally:
        _installed = _NOT_TRACING
        # Flushing waits for the collector (at most the exporter's timeout): off the loop.
        with anyio.CancelScope(shield=True):
            await anyio.to_thread.run_sync(provider.shutdown)


def _resource(replica_id: str) -> Resource:
    """The service as OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES describe it, "tierank"
    unless they name it, and the replica as its instance (which replica ran this job)."""
    detected = Resource.create({SERVICE_INSTANCE_ID: replica_id})
    if str(detected.attributes.get(SERVICE_NAME, "")).startswith("unknown_service"):
        detected = detected.merge(Resource({SERVICE_NAME: SERVICE}))
    return detected


def tracer() -> trace.Tracer:
    return _installed.tracer


def capturing_content() -> bool:
    """Whether spans may carry prompts, passages and answers (--trace-content): off unless the
    operator says so, as the GenAI conventions ask."""
    return _installed.capture_content


def tracing_now() -> bool:
    return _installed is not _NOT_TRACING


def incoming_context(metadata: Mapping[str, str]) -> otel_context.Context:
    """The trace context a caller sent (W3C `traceparent`, or what OTEL_PROPAGATORS names)."""
    return propagate.extract(metadata)


def current_trace_context() -> str:
    """The current span's context as a W3C traceparent, to be stored; "" when not tracing."""
    carrier: dict[str, str] = {}
    _STORED_FORM.inject(carrier)
    return carrier.get(_TRACEPARENT, "")


def stored_context(traceparent: str) -> otel_context.Context | None:
    """The context a stored traceparent stands for; None for "" (a job made without tracing)."""
    if not traceparent:
        return None
    return _STORED_FORM.extract({_TRACEPARENT: traceparent})


@contextmanager
def in_stored_trace(traceparent: str) -> Iterator[None]:
    """The stored context current for the block, with no span of its own: what is logged in
    it (a job's lines outside its runs: claimed, lease lost, cannot resume) carries its trace
    id, and tasks started in it inherit it. Nothing for "" (made without tracing)."""
    context = stored_context(traceparent)
    if context is None:
        yield
        return
    token = otel_context.attach(context)
    try:
        yield
    finally:
        otel_context.detach(token)


def trace_id_of(traceparent: str) -> str:
    """The 32 hex digits of a stored traceparent's trace id ("" for none): what trace UIs and
    `tierank jobs` show."""
    parts = traceparent.split("-")
    return parts[1] if len(parts) == 4 else ""


@contextmanager
def current(span: trace.Span) -> Iterator[None]:
    """`span` current for the block without ending it there (it ends when its work does)."""
    with trace.use_span(span, end_on_exit=False):
        yield
