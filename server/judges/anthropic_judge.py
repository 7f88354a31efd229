"""Anthropic messages API. Asks for the `[3] > [1]` text form by default (every Claude model
follows it, with or without extended thinking); option format=json asks for JSON instead.

Prompt caching: Anthropic caches only what a request marks with `cache_control`, and only a
prefix of at least the model's minimum length; a marked prefix below it is processed
uncached, a marked one above it is written to the cache at 1.25x the input price on the first
call and read at 0.1x after. So the prompt's stable part (instructions, rubric, query) goes as
its own text block, marked only when it is long enough to be cached by the model.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import anthropic

from tierank.server.judges.base import JudgeConfig
from tierank.server.judges.bounded_http import bounded_event_hooks
from tierank.server.judges.llm import (
    AnswerSchema,
    Completion,
    LLMJudge,
    Message,
    ProviderShared,
)
from tierank.server.judges.prices import TokenCounts
from tierank.server.judges.prompt import (
    AnswerFormat,
    PromptParts,
    estimate_tokens,
    upper_bound_tokens,
)
from tierank.server.judges.sdk_errors import stainless_errors

# Anthropic's minimum thinking budget is 1024 tokens.
DEFAULT_THINKING_BUDGET = 2048
CACHE_CONTROL = {"type": "ephemeral"}
# The shortest prefix each model caches, in tokens, by model-name prefix (the longest prefix that
# matches wins), from "Prompt caching: cache limitations" in Anthropic's documentation
# (platform.claude.com/docs/en/build-with-claude/prompt-caching), read 2026-11-28.
MIN_CACHEABLE_TOKENS = {
    "claude-opus-4-5": 4096,
    "claude-opus-4-6": 4096,
    "claude-opus-4-7": 2048,
    "claude-opus-4-1": 1024,
    "claude-opus-4": 1024,
    "claude-sonnet-4-5": 1024,
    "claude-sonnet-4": 1024,
    "claude-3-7-sonnet": 1024,
    "claude-haiku-4-5": 4096,
    "claude-3-5-haiku": 2048,
    "claude-3-haiku": 2048,
}
# A model not in the table is assumed to need the largest minimum known: a mark below a model's
# minimum costs nothing but is a promise the request cannot keep.
UNKNOWN_MODEL_MIN_CACHEABLE_TOKENS = max(MIN_CACHEABLE_TOKENS.values())


def min_cacheable_tokens(model: str) -> int:
    matches = [prefix for prefix in MIN_CACHEABLE_TOKENS if model.startswith(prefix)]
    if not matches:
        return UNKNOWN_MODEL_MIN_CACHEABLE_TOKENS
    return MIN_CACHEABLE_TOKENS[max(matches, key=len)]


def make_anthropic_client(api_key: str, base_url: str | None) -> anthropic.AsyncAnthropic:
    return anthropic.AsyncAnthropic(
        api_key=api_key,
        base_url=base_url,
        max_retries=0,
        http_client=anthropic.DefaultAsyncHttpxClient(event_hooks=bounded_event_hooks()),
    )


class AnthropicJudge(LLMJudge):
    provider = "anthropic"
    default_format = AnswerFormat.TEXT
    known_options = frozenset({"format", "thinking_budget"})

    def __init__(
        self, config: JudgeConfig, shared: ProviderShared, client: anthropic.AsyncAnthropic
    ) -> None:
        super().__init__(config, shared)
        self.client = client
        self.thinking_budget = int(config.options.get("thinking_budget", DEFAULT_THINKING_BUDGET))
        # The shortest prefix the model caches: looked up once, read for every message.
        self._min_cacheable = min_cacheable_tokens(config.model)

    def output_allowance(self, answer_tokens: int) -> int:
        # max_tokens must exceed the thinking budget, which it includes.
        answer = self.config.max_output_tokens or answer_tokens
        return answer + (self.thinking_budget if self.config.reasoning else 0)

    def request_params(self, messages: Sequence[Message], max_output_tokens: int) -> dict[str, Any]:
        """The messages API parameters of one request, sent on their own or in a batch."""
        # The messages API has no response schema: the prompt states the form to answer in.
        request: dict[str, Any] = {
            "model": self.config.model,
            "max_tokens": max_output_tokens,
            "messages": [self._message(m) for m in messages],
        }
        if self.config.reasoning:
            request["thinking"] = {"type": "enabled", "budget_tokens": self.thinking_budget}
        elif self.config.temperature is not None:
            # Extended thinking accepts no temperature other than the default.
            request["temperature"] = self.config.temperature
        return request

    async def _complete(
        self,
        messages: Sequence[Message],
        max_output_tokens: int,
        seed: int,
        schema: AnswerSchema | None,
    ) -> Completion:
        with stainless_errors(anthropic):
            response = await self.client.messages.create(
                **self.request_params(messages, max_output_tokens)
            )
        return message_completion(response)

    def cache_write_bound(self, prompt: PromptParts) -> int:
        # The prompt and the corrective follow-up that repeats it may each write the marked
        # part (a follow-up can reach another server before the first write is visible).
        return 2 * upper_bound_tokens(prompt.stable) if self._marks(prompt.stable) else 0

    def _marks(self, stable: str) -> bool:
        """Whether a stable part this long is marked for the prompt cache: only when the model
        caches a prefix that long."""
        return estimate_tokens(stable) >= self._min_cacheable

    def _message(self, message: Message) -> dict[str, Any]:
        """The message as content blocks: its stable part first, marked for the prompt cache
        when the model caches a prefix that long, then the rest."""
        stable, rest = message.text[: message.stable_chars], message.text[message.stable_chars :]
        if not stable:
            return {"role": message.role, "content": message.text}
        block: dict[str, Any] = {"type": "text", "text": stable}
        if self._marks(stable):
            block["cache_control"] = CACHE_CONTROL
        blocks = [block, {"type": "text", "text": rest}] if rest else [block]
        return {"role": message.role, "content": blocks}


def message_completion(response: anthropic.types.Message) -> Completion:
    """A message read into our Completion, as answered call by call or in a batch."""
    text = "".join(block.text for block in response.content if block.type == "text")
    return Completion(
        text=text,
        truncated=response.stop_reason == "max_tokens",
        tokens=_tokens(response.usage),
        response_id=response.id or "",
        response_model=response.model or "",
        finish_reason=response.stop_reason or "",
    )


def _tokens(usage: anthropic.types.Usage) -> TokenCounts:
    # Anthropic's input_tokens excludes cache reads and writes; ours includes both.
    read = usage.cache_read_input_tokens or 0
    written = usage.cache_creation_input_tokens or 0
    return TokenCounts(
        input=usage.input_tokens + read + written,
        output=usage.output_tokens,
        cached_input=read,
        cache_write=written,
    )
