"""structlog configuration, in one place: JSON lines on stderr with context ids bound.

Libraries log through the standard library (psycopg, its pool, the provider SDKs' httpx); their
records go through the same renderer, so that every line of the log is one JSON object (or one
console line), never a bare message among them.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import MutableMapping
from typing import Any

import structlog
from opentelemetry import trace

# The libraries' own info lines (httpx logs every request) are not the server's story.
_LIBRARY_LEVEL = logging.WARNING


def add_trace_ids(
    _logger: object, _method: str, event: MutableMapping[str, Any]
) -> MutableMapping[str, Any]:
    """The trace and span ids of the span current where a line is logged (with tracing on), so
    that a job's log lines and its trace find each other."""
    span_context = trace.get_current_span().get_span_context()
    if span_context.is_valid:
        event.setdefault("trace_id", trace.format_trace_id(span_context.trace_id))
        event.setdefault("span_id", trace.format_span_id(span_context.span_id))
    return event


def configure(level: str, fmt: str) -> None:
    """Log at `level` and above (debug, info, warning, error), as `fmt` (json or console)."""
    renderer = (
        structlog.processors.JSONRenderer()
        if fmt == "json"
        else structlog.dev.ConsoleRenderer(colors=False)
    )
    timestamper = structlog.processors.TimeStamper(fmt="iso", utc=True)
    threshold = logging.getLevelNamesMapping()[level.upper()]
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            add_trace_ids,
            structlog.processors.add_log_level,
            timestamper,
            structlog.processors.format_exc_info,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(threshold),
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
        cache_logger_on_first_use=True,
    )
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(
        structlog.stdlib.ProcessorFormatter(
            foreign_pre_chain=[
                structlog.contextvars.merge_contextvars,
                add_trace_ids,
                structlog.stdlib.add_log_level,
                structlog.stdlib.add_logger_name,
                timestamper,
            ],
            processors=[
                structlog.stdlib.ProcessorFormatter.remove_processors_meta,
                structlog.processors.format_exc_info,
                renderer,
            ],
        )
    )
    root = logging.getLogger()
    root.handlers = [handler]
    root.setLevel(max(threshold, _LIBRARY_LEVEL))
