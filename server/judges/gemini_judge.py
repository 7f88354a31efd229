"""Google Gemini through google-genai's generateContent, with a JSON response schema."""

from __future__ import annotations

from collections.abc import Sequence

import httpx2
from google import genai
from google.genai import types

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
from tierank.server.judges.prompt import AnswerFormat
from tierank.server.judges.sdk_errors import genai_errors

# -1 asks Gemini for a dynamic thinking budget.
DYNAMIC_THINKING_BUDGET = -1


class GeminiClient:
    """The genai client with its own HTTP client, so that the transport (httpx) does not
    change with whether aiohttp happens to be installed, and it can be closed."""

    def __init__(self, api_key: str, base_url: str | None) -> None:
        self.http = httpx2.AsyncClient(event_hooks=bounded_event_hooks())
        options = types.HttpOptions(
            base_url=base_url,
            # One attempt: our retry loop is the only one.
            retry_options=types.HttpRetryOptions(attempts=1),
            httpx_async_client=self.http,
        )
        self.genai = genai.Client(api_key=api_key, http_options=options)

    async def aclose(self) -> None:
        await self.http.aclose()


class GeminiJudge(LLMJudge):
    provider = "gemini"
    default_format = AnswerFormat.JSON
    known_options = frozenset({"format", "thinking_budget"})

    def __init__(self, config: JudgeConfig, shared: ProviderShared, client: GeminiClient) -> None:
        super().__init__(config, shared)
        self.client = client

    def generation_config(
        self, max_output_tokens: int, seed: int, schema: AnswerSchema | None
    ) -> types.GenerateContentConfig:
        config = types.GenerateContentConfig(
            max_output_tokens=max_output_tokens,
            temperature=self.config.temperature,
            seed=seed,
            # One HTTP request per call: no automatic continuation hops.
            automatic_continuation=False,
        )
        if schema is not None:
            config.response_mime_type = "application/json"
            config.response_json_schema = dict(schema.schema)
        if self.config.reasoning is not None:
            # Gemini thinks by default on 2.5 models: False must switch it off explicitly.
            budget = (
                int(self.config.options.get("thinking_budget", DYNAMIC_THINKING_BUDGET))
                if self.config.reasoning
                else 0
            )
            config.thinking_config = types.ThinkingConfig(thinking_budget=budget)
        return config

    async def _complete(
        self,
        messages: Sequence[Message],
        max_output_tokens: int,
        seed: int,
        schema: AnswerSchema | None,
    ) -> Completion:
        with genai_errors():
            response = await self.client.genai.aio.models.generate_content(
                model=self.config.model,
                contents=contents(messages),
                config=self.generation_config(max_output_tokens, seed, schema),
            )
        return content_completion(response)


def contents(messages: Sequence[Message]) -> list[types.Content]:
    """The conversation as Gemini contents, sent on their own or in a batch."""
    return [
        types.Content(
            role="model" if m.role == "assistant" else "user", parts=[types.Part(text=m.text)]
        )
        for m in messages
    ]


def content_completion(response: types.GenerateContentResponse) -> Completion:
    """A generateContent response read into our Completion, call by call or in a batch."""
    candidate = response.candidates[0] if response.candidates else None
    parts = candidate.content.parts if candidate and candidate.content else None
    text = "".join(part.text for part in parts or () if part.text and not part.thought)
    finish = candidate.finish_reason if candidate else None
    return Completion(
        text=text,
        truncated=finish == types.FinishReason.MAX_TOKENS,
        tokens=_tokens(response.usage_metadata),
        response_id=response.response_id or "",
        response_model=response.model_version or "",
        finish_reason=str(getattr(finish, "value", finish)) if finish else "",
    )


def _tokens(usage: types.GenerateContentResponseUsageMetadata | None) -> TokenCounts:
    if usage is None:
        return TokenCounts()
    # prompt_token_count includes cached content; thoughts are billed as output.
    return TokenCounts(
        input=usage.prompt_token_count or 0,
        output=(usage.candidates_token_count or 0) + (usage.thoughts_token_count or 0),
        cached_input=usage.cached_content_token_count or 0,
    )
