"""OpenAI chat completions, and any OpenAI-compatible server (vLLM, Ollama, llama.cpp)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import openai

from tierank.server.judges.base import FailureKind, JudgeConfig
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

DEFAULT_REASONING_EFFORT = "medium"


def make_openai_client(api_key: str, base_url: str | None) -> openai.AsyncOpenAI:
    # Our retry loop is the only one: the SDK's would hide 429s and double the waits.
    return openai.AsyncOpenAI(api_key=api_key, base_url=base_url, max_retries=0)


class OpenAIJudge(LLMJudge):
    provider = "openai"
    default_format = AnswerFormat.JSON
    known_options = frozenset({"format", "reasoning_effort"})
    # The OpenAI API's name for the output cap; reasoning models accept only this one.
    max_tokens_parameter: ClassVar[str] = "max_completion_tokens"

    def __init__(
        self, config: JudgeConfig, shared: ProviderShared, client: openai.AsyncOpenAI
    ) -> None:
        super().__init__(config, shared)
        self.client = client

    def _request(
        self,
        messages: Sequence[Message],
        max_output_tokens: int,
        seed: int,
        schema: AnswerSchema | None,
    ) -> dict[str, Any]:
        request: dict[str, Any] = {
            "model": self.config.model,
            "messages": [{"role": m.role, "content": m.text} for m in messages],
            self.max_tokens_parameter: max_output_tokens,
            "seed": seed,
        }
        if self.config.temperature is not None:
            request["temperature"] = self.config.temperature
        if self.config.reasoning:
            effort = self.config.options.get("reasoning_effort", DEFAULT_REASONING_EFFORT)
            request["reasoning_effort"] = effort
        if schema is not None:
            request["response_format"] = {
                "type": "json_schema",
                "json_schema": {"name": schema.name, "strict": True, "schema": schema.schema},
            }
        return request

    async def _complete(
        self,
        messages: Sequence[Message],
        max_output_tokens: int,
        seed: int,
        schema: AnswerSchema | None,
    ) -> Completion:
        try:
            response = await self.client.chat.completions.create(
                **self._request(messages, max_output_tokens, seed, schema)
            )
        except openai.APIStatusError as error:
            raise classify_status(
                error.status_code, error.response.headers, error.message
            ) from None
        except openai.APITimeoutError:
            raise CallError(FailureKind.TIMEOUT, "the SDK timed out") from None
        except openai.APIConnectionError as error:
            raise CallError(FailureKind.UNAVAILABLE, f"connection failed: {error}") from None
        if not response.choices:
            raise CallError(FailureKind.SERVER_ERROR, "the response holds no choices")
        choice = response.choices[0]
        return Completion(
            text=choice.message.content or "",
            truncated=choice.finish_reason == "length",
            tokens=_tokens(response.usage),
        )


def _tokens(usage: openai.types.CompletionUsage | None) -> TokenCounts:
    if usage is None:
        return TokenCounts()
    details = usage.prompt_tokens_details
    cached = (details.cached_tokens or 0) if details else 0
    # prompt_tokens includes the cached ones; completion_tokens includes reasoning tokens.
    return TokenCounts(
        input=usage.prompt_tokens, output=usage.completion_tokens, cached_input=cached
    )


class OpenAICompatibleJudge(OpenAIJudge):
    """A self-hosted server speaking the chat completions dialect. Plain-text rankings by
    default: small local models follow `[3] > [1]` more reliably than a JSON schema, and
    not every server enforces one."""

    provider = "openai-compatible"
    default_format = AnswerFormat.TEXT
    known_options = frozenset({"format", "reasoning_effort"})
    # vLLM, Ollama and llama.cpp all read max_tokens; not all read max_completion_tokens.
    max_tokens_parameter = "max_tokens"

    def _identity_extras(self) -> Mapping[str, object]:
        # On a self-hosted server the endpoint decides which weights a model name means.
        return {"base_url": self.shared.provider_settings.base_url}
