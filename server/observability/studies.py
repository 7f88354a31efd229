"""A study's spans: one trace per study, as a job has one.

A study's trace is the one its CreateStudy call was in (the caller's, when it sent a
traceparent); that context is stored with the study. Pooling a round (StartStudy, ExtendStudy)
is a "tierank.study.start" or "tierank.study.extend" span of it, linked to the call that asked
for it when that call was in another trace; each time a driver takes a round up (its start, a
restart, another replica after a failover) is a "tierank.study.run" span of it, under which the
top-ups ("tierank.study.top_up") and the study's end ("tierank.study.end") are. The jobs a run
creates store its context as theirs, so every query's "tierank.job.run" spans, on whichever
replica, are in the study's trace too.

Ids, counts and states only: a study's topics, passages and rubric never go into a span.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Protocol

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace import Link, Status, StatusCode

from tierank.server.observability.tracing import stored_context, tracer, tracing_now

Attributes = Mapping[str, str | int]


class StudySpan:
    """What a study's work tells its span; a no-op when not tracing."""

    def __init__(self, span: trace.Span) -> None:
        self._span = span

    def set(self, name: str, value: str | int) -> None:
        self._span.set_attribute(name, value)

    def failed(self, error: BaseException) -> None:
        """The work failed with `error`, handled where it was raised: its type is the status
        (its message could quote the study's inputs)."""
        self._span.set_status(Status(StatusCode.ERROR, type(error).__name__))


class _Study(Protocol):
    """What a study's spans need of its stored record."""

    @property
    def study_id(self) -> str: ...
    @property
    def tenant(self) -> str: ...
    @property
    def trace_context(self) -> str: ...


class StudyTelemetry:
    def __init__(self, study: _Study) -> None:
        self._trace_context = study.trace_context
        self._attributes = {"tierank.study.id": study.study_id, "tierank.tenant": study.tenant}

    @contextmanager
    def part(self, name: str, attributes: Attributes | None = None) -> Iterator[StudySpan]:
        """A span directly under the study's stored context, current for the block: a round's
        pooling or run. The span current where it starts (the call that asked for it) is
        linked to it when that is in another trace."""
        context = stored_context(self._trace_context)
        asking = trace.get_current_span().get_span_context()
        study_trace = trace.get_current_span(context).get_span_context().trace_id
        links = [Link(asking)] if asking.is_valid and asking.trace_id != study_trace else []
        with self._span(name, attributes, context, links) as span:
            yield span

    @contextmanager
    def step(self, name: str, attributes: Attributes | None = None) -> Iterator[StudySpan]:
        """A span under the current one (a run's top-up or end), current for the block."""
        with self._span(name, attributes, None, []) as span:
            yield span

    @contextmanager
    def _span(
        self,
        name: str,
        attributes: Attributes | None,
        context: Context | None,
        links: list[Link],
    ) -> Iterator[StudySpan]:
        if not tracing_now():
            yield StudySpan(trace.INVALID_SPAN)
            return
        with tracer().start_as_current_span(
            name,
            context=context,
            links=links,
            attributes={**self._attributes, **(attributes or {})},
            # An exception's message could quote a study's inputs; a caller's mistake is the
            # call's status, not the study's failure: the driver says when the study failed.
            record_exception=False,
            set_status_on_exception=False,
        ) as span:
            yield StudySpan(span)
