"""What the server tells the teams that run it, beside its logs: OpenTelemetry traces (off
unless an OTLP endpoint is configured) and the judge-level Prometheus series. docs/operations.md
describes both. Nothing here imports the layers it observes: they call it."""

from tierank.server.observability.genai import chat_span
from tierank.server.observability.jobs import JobTelemetry
from tierank.server.observability.rpc import TracingInterceptor
from tierank.server.observability.tracing import trace_id_of, tracing, tracing_configured

__all__ = [
    "JobTelemetry",
    "TracingInterceptor",
    "chat_span",
    "trace_id_of",
    "tracing",
    "tracing_configured",
]
