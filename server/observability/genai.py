"""A span per judge call to an LLM provider, in OpenTelemetry's GenAI semantic conventions.

The span is a CLIENT span named "chat {model}" carrying gen_ai.operation.name, the provider as
both gen_ai.system (the conventions up to v1.36, which most collectors and the OpenAI and
Anthropic instrumentations still emit) and gen_ai.provider.name (its name from v1.37 on),
gen_ai.request.model and the request's settings, and once answered gen_ai.response.id,
gen_ai.response.model, gen_ai.response.finish_reasons and gen_ai.usage.input_tokens /
output_tokens, with the parts of the input served from and written to the provider's prompt
cache as gen_ai.usage.cache_read.input_tokens / cache_creation.input_tokens (the conventions'
names, as opentelemetry-semantic-conventions 0.66b2 spells them); error.type names a failure's
kind. Beside them: the job, tenant and call it belongs to, the requests it sent and how many
were retries, the time spent waiting for a rate limit or a slot, and the provider's breaker
state after the call.

Prompts, passages and answers go into a span (gen_ai.input.messages, gen_ai.output.messages)
only with --trace-content; a failure's message stays out too without it (a provider's error can
quote the request), its kind is in error.type. A key is never in a span: failure messages are
already scrubbed of the tenant's keys, and the request's headers are not recorded.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar

from opentelemetry import trace
from opentelemetry.trace import SpanKind, Status, StatusCode

from tierank.server.observability.tracing import capturing_content, tracer, tracing_now

# What a job's judge calls carry besides their own attributes (set by JobTelemetry.running,
# inherited by the tasks the job starts).
job_attributes: ContextVar[Mapping[str, str] | None] = ContextVar("job_attributes", default=None)


class ChatSpan:
    """What one judge call tells its span as it goes; every method is a no-op on a span that
    records nothing (tracing off, or not sampled)."""

    def __init__(self, span: trace.Span) -> None:
        self._span = span
        self._recording = span.is_recording()
        self._finish_reasons: list[str] = []

    def sent(self, messages: Sequence[tuple[str, str]]) -> None:
        """The conversation as sent: (role, text) pairs; recorded only with content capture."""
        if self._recording and capturing_content():
            parts = [
                {"role": role, "parts": [{"type": "text", "content": text}]}
                for role, text in messages
            ]
            self._span.set_attribute("gen_ai.input.messages", json.dumps(parts))

    def answered(self, response_id: str, response_model: str, finish_reason: str) -> None:
        if not self._recording:
            return
        if response_id:
            self._span.set_attribute("gen_ai.response.id", response_id)
        if response_model:
            self._span.set_attribute("gen_ai.response.model", response_model)
        if finish_reason:
            self._finish_reasons.append(finish_reason)
            self._span.set_attribute("gen_ai.response.finish_reasons", self._finish_reasons)

    def ended(
        self,
        *,
        input_tokens: int,
        output_tokens: int,
        answers: Sequence[str],
        cache_read_input_tokens: int = 0,
        cache_creation_input_tokens: int = 0,
        failure_kind: str | None,
        requests: int,
        retries: int,
        waited_s: float,
        breaker_state: str,
    ) -> None:
        if not self._recording:
            return
        span = self._span
        span.set_attribute("gen_ai.usage.input_tokens", input_tokens)
        span.set_attribute("gen_ai.usage.output_tokens", output_tokens)
        # Parts of gen_ai.usage.input_tokens, as the GenAI conventions ask.
        span.set_attribute("gen_ai.usage.cache_read.input_tokens", cache_read_input_tokens)
        span.set_attribute("gen_ai.usage.cache_creation.input_tokens", cache_creation_input_tokens)
        span.set_attribute("tierank.judge.requests", requests)
        span.set_attribute("tierank.judge.retries", retries)
        span.set_attribute("tierank.judge.wait_seconds", waited_s)
        span.set_attribute("tierank.judge.breaker_state", breaker_state)
        if answers and capturing_content():
            parts = [
                {"role": "assistant", "parts": [{"type": "text", "content": text}]}
                for text in answers
            ]
            span.set_attribute("gen_ai.output.messages", json.dumps(parts))
        if failure_kind is not None:
            span.set_attribute("error.type", failure_kind)
            span.set_status(Status(StatusCode.ERROR, failure_kind))


@contextmanager
def chat_span(
    provider: str,
    model: str,
    *,
    system: str,
    call_id: str,
    max_tokens: int,
    temperature: float | None,
    seed: int,
    output_type: str,
    server_address: str,
) -> Iterator[ChatSpan]:
    """The span of one judge call, current for the block; `system`: the provider as the
    GenAI conventions name it (judges/providers.py)."""
    if not tracing_now():
        yield ChatSpan(trace.INVALID_SPAN)
        return
    attributes: dict[str, str | int | float] = {
        "gen_ai.operation.name": "chat",
        "gen_ai.system": system,
        "gen_ai.provider.name": system,
        "gen_ai.request.model": model,
        "gen_ai.request.max_tokens": max_tokens,
        "gen_ai.request.seed": seed,
        "gen_ai.output.type": output_type,
        "tierank.judge.provider": provider,
        **(job_attributes.get() or {}),
    }
    if call_id:
        attributes["tierank.call.id"] = call_id
    if temperature is not None:
        attributes["gen_ai.request.temperature"] = temperature
    if server_address:
        attributes["server.address"] = server_address
    with tracer().start_as_current_span(
        f"chat {model}",
        kind=SpanKind.CLIENT,
        attributes=attributes,
        # An exception's message could quote the request: the outcome is recorded by ended().
        record_exception=False,
        set_status_on_exception=False,
    ) as span:
        yield ChatSpan(span)
