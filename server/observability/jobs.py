"""A job's spans and judge-level series: what the runner tells as it runs a job.

A job's trace is the one its CreateJob call was in (the caller's, when it sent a traceparent);
that context is stored with the job, so every run of it, here after a restart or on another
replica after a failover, is a "tierank.job.run" span in the same trace. Under a run, each plan
the tournament makes is a "tierank.job.wave" span, from the plan to its last answer, and the
judge calls it starts are the waves' children (server/observability/genai.py).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Protocol

from opentelemetry import trace
from opentelemetry.trace import Span

from tierank.server import metrics
from tierank.server.observability.genai import job_attributes
from tierank.server.observability.tracing import current, stored_context, tracer, tracing_now

# The outcomes of a verdict that are no failure (a failure's outcome is its kind).
OK = "ok"
CACHED = "cached"


class _Usage(Protocol):
    @property
    def latency_s(self) -> float: ...
    @property
    def input_tokens(self) -> int: ...
    @property
    def output_tokens(self) -> int: ...
    @property
    def cached_input_tokens(self) -> int: ...
    @property
    def cache_write_input_tokens(self) -> int: ...
    @property
    def cost_usd(self) -> float: ...


@dataclass
class _Wave:
    span: Span
    waiting: int
    cache_hits: int = 0
    failures: int = 0


class JobTelemetry:
    def __init__(self, job_id: str, tenant: str, trace_context: str) -> None:
        self._tenant = tenant
        self._trace_context = trace_context
        self._attributes = {"tierank.job.id": job_id, "tierank.tenant": tenant}
        self._waves: dict[str, _Wave] = {}

    @contextmanager
    def running(self, lease_epoch: int) -> Iterator[None]:
        """One run of the job (until it ends, is handed back or is taken over), in its trace."""
        if not tracing_now():
            yield
            return
        token = job_attributes.set(self._attributes)
        try:
            with tracer().start_as_current_span(
                "tierank.job.run",
                context=stored_context(self._trace_context),
                attributes={**self._attributes, "tierank.job.lease_epoch": lease_epoch},
            ):
                try:
                    yield
                finally:
                    # Calls cut short (a cancel, a drain, a lost lease) leave their waves open.
                    for wave in {id(w): w for w in self._waves.values()}.values():
                        wave.span.set_attribute("tierank.wave.abandoned", True)
                        self._end(wave)
                    self._waves.clear()
        finally:
            job_attributes.reset(token)

    @contextmanager
    def wave(self, call_ids: Sequence[str], resumed: bool = False) -> Iterator[None]:
        """Calls started in the block are the wave's; it ends when the last of them answers."""
        if not call_ids or not tracing_now():
            yield
            return
        span = tracer().start_span(
            "tierank.job.wave",
            attributes={
                **self._attributes,
                "tierank.wave.calls": len(call_ids),
                "tierank.wave.resumed": resumed,
            },
        )
        wave = _Wave(span, waiting=len(call_ids))
        for call_id in call_ids:
            self._waves[call_id] = wave
        with current(span):
            yield

    def verdict(
        self,
        call_id: str,
        provider: str,
        model: str,
        outcome: str,
        usage: _Usage,
    ) -> None:
        """A call's answer (or failure, or cache hit: `outcome` "cached") is in: count it,
        and end its wave once the wave's last answer is in."""
        tenant = self._tenant
        cached = outcome == CACHED
        metrics.VERDICTS.labels(tenant, provider, outcome).inc()
        if not cached:
            model = metrics.model_label(provider, model)
            metrics.JUDGE_LATENCY.labels(provider, model).observe(usage.latency_s, _exemplar())
            metrics.INPUT_TOKENS.labels(tenant, provider, model).inc(usage.input_tokens)
            metrics.OUTPUT_TOKENS.labels(tenant, provider, model).inc(usage.output_tokens)
            metrics.CACHED_INPUT_TOKENS.labels(tenant, provider, model).inc(
                usage.cached_input_tokens
            )
            metrics.CACHE_WRITE_INPUT_TOKENS.labels(tenant, provider, model).inc(
                usage.cache_write_input_tokens
            )
            metrics.COST_USD.labels(tenant, provider, model).inc(usage.cost_usd)
        wave = self._waves.pop(call_id, None)
        if wave is None:
            return
        wave.cache_hits += cached
        wave.failures += outcome not in (OK, CACHED)
        wave.waiting -= 1
        if wave.waiting == 0:
            self._end(wave)

    def _end(self, wave: _Wave) -> None:
        wave.span.set_attribute("tierank.wave.cache_hits", wave.cache_hits)
        wave.span.set_attribute("tierank.wave.failures", wave.failures)
        wave.span.end()


def _exemplar() -> dict[str, str] | None:
    """The current trace, for a latency bucket to link to (None when not tracing)."""
    span_context = trace.get_current_span().get_span_context()
    if not span_context.is_valid:
        return None
    return {
        "trace_id": trace.format_trace_id(span_context.trace_id),
        "span_id": trace.format_span_id(span_context.span_id),
    }
