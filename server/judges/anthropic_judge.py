"""Anthropic messages API. Asks for the `[3] > [1]` text form by default (every Claude model
follows it, with or without extended thinking); option format=json asks for JSON instead."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import anthropic

from tierank.server.judges.base import FailureKind, JudgeConfig
from tierank.server.judges.bounded_http import ResponseTooLarge, bounded_event_hooks
from tierank.server.judges.llm import (
    AnswerSchema,
    Completion,
    LLMJudge,
    Message,
    ProviderShared,
)
from tierank.server.judges.prices import TokenCounts
from tierank.server.judges.prompt import AnswerFormat
from tierank.server.judges.retry import CallError, classify_status

# Anthropic's minimum thinking budget is 1024 tokens.
DEFAULT_THINKING_BUDGET = 2048


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
            "messages": [{"role": m.role, "content": m.text} for m in messages],
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
        try:
            response = await self.client.messages.create(
                **self.request_params(messages, max_output_tokens)
            )
        except anthropic.APIStatusError as error:
            raise classify_status(
                error.status_code, error.response.headers, error.message
            ) from None
        except anthropic.APITimeoutError:
            raise CallError(FailureKind.TIMEOUT, "the SDK timed out") from None
        except anthropic.APIConnectionError as error:
            if isinstance(error.__cause__, ResponseTooLarge):
                # Unwrapped, as the other SDKs let it through: LLMJudge classifies it.
                raise error.__cause__ from None
            raise CallError(FailureKind.CONNECTION_ERROR, f"connection failed: {error}") from None
        return message_completion(response)


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
