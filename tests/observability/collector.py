"""A small OTLP/gRPC trace collector for the tests: it keeps every ExportTraceServiceRequest
it receives, as the bytes on the wire and as the spans in them."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from concurrent import futures
from dataclasses import dataclass

import grpc
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc
from opentelemetry.proto.common.v1.common_pb2 import AnyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span


@dataclass(frozen=True)
class ReceivedSpan:
    span: Span
    resource: dict[str, object]

    @property
    def name(self) -> str:
        return self.span.name

    @property
    def trace_id(self) -> str:
        return self.span.trace_id.hex()

    @property
    def span_id(self) -> str:
        return self.span.span_id.hex()

    @property
    def parent_id(self) -> str:
        return self.span.parent_span_id.hex()

    @property
    def attributes(self) -> dict[str, object]:
        return {kv.key: _value(kv.value) for kv in self.span.attributes}


def _value(value: AnyValue) -> object:
    kind = value.WhichOneof("value")
    if kind == "array_value":
        return [_value(v) for v in value.array_value.values]
    return getattr(value, kind) if kind else None


class _TraceService(trace_service_pb2_grpc.TraceServiceServicer):
    def __init__(self, collector: TraceCollector) -> None:
        self._collector = collector

    def Export(self, request, context):
        self._collector._received(request)
        return trace_service_pb2.ExportTraceServiceResponse()


class TraceCollector:
    """Listens on 127.0.0.1 (a free port) while open; `endpoint` is what --otlp-endpoint takes."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.raw: list[bytes] = []
        self._spans: list[ReceivedSpan] = []
        self._server = grpc.server(futures.ThreadPoolExecutor(4))
        trace_service_pb2_grpc.add_TraceServiceServicer_to_server(_TraceService(self), self._server)
        self._port = self._server.add_insecure_port("127.0.0.1:0")

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self._port}"

    def __enter__(self) -> TraceCollector:
        self._server.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._server.stop(None)

    def _received(self, request: trace_service_pb2.ExportTraceServiceRequest) -> None:
        spans = [
            ReceivedSpan(span, {kv.key: _value(kv.value) for kv in resource.resource.attributes})
            for resource in request.resource_spans
            for scope in resource.scope_spans
            for span in scope.spans
        ]
        with self._lock:
            self.raw.append(request.SerializeToString())
            self._spans.extend(spans)

    @property
    def spans(self) -> list[ReceivedSpan]:
        with self._lock:
            return list(self._spans)

    def wait_for(
        self, found: Callable[[list[ReceivedSpan]], bool], timeout: float = 20
    ) -> list[ReceivedSpan]:
        """The spans received, once `found` holds of them (AssertionError after `timeout`)."""
        give_up = time.monotonic() + timeout
        while not found(spans := self.spans):
            assert time.monotonic() < give_up, f"not received: {[s.name for s in spans]}"
            time.sleep(0.05)
        return spans


def named(spans: list[ReceivedSpan], name: str) -> Iterator[ReceivedSpan]:
    return (span for span in spans if span.name == name)
