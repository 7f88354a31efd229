"""OpenAI chat completions, and any OpenAI-compatible server (vLLM, Ollama, llama.cpp)."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import openai
import structlog
from openai.types.chat import ChatCompletion

from tierank.server.judges.base import BatchRequest, FailureKind, JudgeConfig, JudgeReply
from tierank.server.judges.bounded_http import bounded_event_hooks
from tierank.server.judges.endpoints import canonical_base_url
from tierank.server.judges.llm import (
    AnswerSchema,
    Completion,
    LLMJudge,
    Message,
    ProviderShared,
)
from tierank.server.judges.prices import TokenCounts
from tierank.server.judges.prompt import AnswerFormat
from tierank.server.judges.retry import CallError
from tierank.server.judges.sdk_errors import stainless_errors

DEFAULT_REASONING_EFFORT = "medium"
# Structured-output forms, strongest first. `text` sends no response_format: the prompt alone
# asks for the JSON answer, and the parser reads it as any other answer.
RESPONSE_FORMATS = ("json_schema", "json_object", "text")
# Listing the served models is a cheap GET, but a server busy with a long completion holds it
# until its slot is free (llama.cpp's and llama-cpp-python's one-slot servers do): a job does not
# wait longer than this for it, going without the verdict cache instead. Admission, which needs
# the identity, waits as long as one of the judge's calls may (`prepare(patient=True)`).
MODEL_LIST_TIMEOUT_S = 10.0
# A model entry's `created` this close to now is the time of the listing (vLLM, llama.cpp),
# not of the weights (Ollama): it says nothing about what is served.
LISTING_TIME_SLACK_S = 300.0
# Fields of a model entry that change with every listing rather than with the weights.
_VOLATILE_MODEL_FIELDS = frozenset({"permission", "permissions", "object"})


def make_openai_client(api_key: str, base_url: str | None) -> openai.AsyncOpenAI:
    # Our retry loop is the only one: the SDK's would hide 429s and double the waits.
    return openai.AsyncOpenAI(
        api_key=api_key,
        base_url=base_url,
        max_retries=0,
        http_client=openai.DefaultAsyncHttpxClient(event_hooks=bounded_event_hooks()),
    )


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

    def request_body(
        self,
        messages: Sequence[Message],
        max_output_tokens: int,
        seed: int,
        schema: AnswerSchema | None,
        response_format: str = "json_schema",
    ) -> dict[str, Any]:
        """The chat completions body of one request, sent on its own or in a batch."""
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
        if schema is not None and response_format == "json_schema":
            request["response_format"] = {
                "type": "json_schema",
                "json_schema": {"name": schema.name, "strict": True, "schema": schema.schema},
            }
        elif schema is not None and response_format == "json_object":
            request["response_format"] = {"type": "json_object"}
        return request

    async def _complete(
        self,
        messages: Sequence[Message],
        max_output_tokens: int,
        seed: int,
        schema: AnswerSchema | None,
    ) -> Completion:
        return await self._send(self.request_body(messages, max_output_tokens, seed, schema))

    async def _send(self, request: Mapping[str, Any]) -> Completion:
        with stainless_errors(openai):
            response = await self.client.chat.completions.create(**request)
        completion = chat_completion(response)
        self._answered_by(response.model)
        return completion

    def _answered_by(self, model: str | None) -> None:
        """What the response says of the model that answered; OpenAI's own is not needed."""


def chat_completion(response: ChatCompletion) -> Completion:
    """A chat completion read into our Completion, as answered call by call or in a batch."""
    if not response.choices:
        raise CallError(FailureKind.SERVER_ERROR, "the response holds no choices")
    choice = response.choices[0]
    return Completion(
        text=choice.message.content or "",
        truncated=choice.finish_reason == "length",
        tokens=_tokens(response.usage),
        response_id=response.id or "",
        response_model=response.model or "",
        finish_reason=choice.finish_reason or "",
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


class ResponseFormats:
    """The structured-output form one endpoint accepts, learned from its refusals and kept for
    the server's lifetime, so each weaker form is tried once per endpoint, not once per call.
    (llama-cpp-python answers HTTP 500 to `json_schema` and accepts `json_object`.)"""

    def __init__(self) -> None:
        self._index = 0

    @property
    def current(self) -> str:
        return RESPONSE_FORMATS[self._index]

    def refused(self, response_format: str) -> bool:
        """Note that the endpoint refused `response_format`; False when there is nothing
        weaker to fall back to. Calls that were refused together fall back one step only."""
        if response_format == RESPONSE_FORMATS[-1]:
            return False
        if response_format == self.current:
            self._index += 1
            structlog.get_logger().warning(
                "openai-compatible endpoint refused a response format; falling back",
                refused=response_format,
                now=self.current,
            )
        return True


class OpenAICompatibleJudge(OpenAIJudge):
    """A self-hosted server speaking the chat completions dialect. Plain-text rankings by
    default: small local models follow `[3] > [1]` more reliably than a JSON schema, and
    not every server enforces one.

    Its verdicts are cached under what the server reports of the model it serves, since the
    name in a job spec need not change when the weights behind it do: the model's entry in
    `/v1/models` (read once per job), or, for a server that has no such list, the `model` field
    of its answers. Until one is known (or when the list could not be read this time), the
    judge's verdicts are neither served from the cache nor stored in it, and its identity is in
    doubt (`identity_doubt`): admission must not take it for a judge never qualified.
    """

    provider = "openai-compatible"
    default_format = AnswerFormat.TEXT
    known_options = frozenset({"format", "reasoning_effort"})
    # vLLM, Ollama and llama.cpp all read max_tokens; not all read max_completion_tokens.
    max_tokens_parameter = "max_tokens"

    def __init__(
        self,
        config: JudgeConfig,
        shared: ProviderShared,
        client: openai.AsyncOpenAI,
        formats: ResponseFormats,
    ) -> None:
        super().__init__(config, shared, client)
        self.formats = formats
        self._listed: str | None = None
        # Until the server answers that it has no model list, its answers' `model` field (an
        # echo of the request on llama.cpp and llama-cpp-python) does not stand in for one.
        self._lists_models = True
        self._reported: str | None = None
        self._listing = asyncio.Lock()
        self._prepared = False
        # Why the model list could not be read, as last tried; and whether a patient try was
        # made (one per judge: a server that cannot answer it then will not a moment later).
        self._listing_failure = ""
        self._waited = False
        # The canonical endpoint, once prepare() has resolved its host name.
        self._server: str | None = None

    @property
    def cacheable(self) -> bool:
        return self.shared.provider_settings.cache_verdicts and self._served_model() is not None

    def _served_model(self) -> str | None:
        return self._reported if not self._lists_models else self._listed

    def _identity_extras(self, as_spelled: bool = False) -> Mapping[str, object]:
        # On a self-hosted server the endpoint decides which weights a model name means.
        base_url = self.shared.provider_settings.base_url or ""
        return {
            "base_url": base_url if as_spelled else self._server or canonical_base_url(base_url),
            "served_model": self._served_model(),
        }

    def _identity_model(self) -> str | None:
        # What the server lists is the model; the name a job gives it only picks the entry.
        return None if self._lists_models and self._listed is not None else self.config.model

    @property
    def identity_doubt(self) -> str | None:
        if self._listed is not None or not self._lists_models:
            return None
        base_url = self._server or self.shared.provider_settings.base_url or ""
        why = self._listing_failure or "not read yet"
        return f"the model list of {base_url} could not be read ({why})"

    def _ready(self, patient: bool) -> bool:
        return self._prepared and (not patient or self._waited or self.identity_doubt is None)

    async def prepare(self, *, patient: bool = False) -> None:
        if self._ready(patient):  # every call after the first: no lock to take
            return
        async with self._listing:
            if self._ready(patient):
                return
            if self._server is None:
                self._server = await self.shared.canonical_endpoint()
            self._listed = await self._list_served_model(patient)
            self._waited = self._waited or patient
            self._prepared = True

    async def judge(self, request: BatchRequest) -> JudgeReply:
        # Also here, for callers that do not prepare (free once prepared): later calls of the
        # job are then cacheable.
        await self.prepare()
        return await super().judge(request)

    async def _list_served_model(self, patient: bool) -> str | None:
        """This model's entry in the server's `/v1/models` (all entries when none has its
        name), without the fields that change with every listing; None when not read.
        `patient`: waits as long as one of the judge's calls may, not MODEL_LIST_TIMEOUT_S."""
        call_timeout_s = self.config.timeout_s or self.shared.provider_settings.timeout_s
        timeout_s = call_timeout_s if patient else min(MODEL_LIST_TIMEOUT_S, call_timeout_s)
        try:
            page = await self.client.with_options(timeout=timeout_s).models.list()
            entries = [_stable_entry(model.model_dump()) for model in page.data]
        except openai.APIStatusError as error:
            # 404 and its kin: no model list here. 5xx: one that failed this time.
            self._lists_models = error.status_code >= 500
            self._listing_failure = f"HTTP {error.status_code}"
            return None
        except openai.APITimeoutError:
            # A one-slot server answers it only once its slot is free: busy, or stuck.
            self._listing_failure = f"no answer within {timeout_s:g} s"
            return None
        except openai.OpenAIError as error:
            self._listing_failure = str(error) or type(error).__name__
            return None
        except (ValueError, TypeError, AttributeError) as error:
            # An HTTP 200 whose body is no model list (not JSON, or JSON of another shape: a
            # proxy's or a loading server's page): unreadable this time, as a failed listing.
            structlog.get_logger().warning(
                "openai-compatible model list unreadable; verdict cache off for this job",
                error=f"{type(error).__name__}: {error}"[:200],
            )
            return None
        mine = [e for e in entries if e.get("id") == self.config.model] or entries
        return json.dumps(mine, sort_keys=True, default=str) if mine else None

    def _answered_by(self, model: str | None) -> None:
        self._reported = model or self._reported

    async def _complete(
        self,
        messages: Sequence[Message],
        max_output_tokens: int,
        seed: int,
        schema: AnswerSchema | None,
    ) -> Completion:
        while True:
            response_format = self.formats.current if schema is not None else "text"
            request = self.request_body(messages, max_output_tokens, seed, schema, response_format)
            try:
                return await self._send(request)
            except CallError as error:
                blamed = _names_format(error, response_format)
                if not (blamed and self.formats.refused(response_format)):
                    raise


def _names_format(error: CallError, response_format: str) -> bool:
    """An HTTP error that blames the structured-output form rather than the server."""
    if error.kind not in (FailureKind.CLIENT_ERROR, FailureKind.SERVER_ERROR):
        return False
    text = error.message.lower()
    return response_format in text or "response_format" in text


def _stable_entry(entry: Mapping[str, Any]) -> dict[str, Any]:
    stable = {k: v for k, v in entry.items() if k not in _VOLATILE_MODEL_FIELDS and v is not None}
    created = stable.get("created")
    if isinstance(created, int | float) and abs(time.time() - created) < LISTING_TIME_SLACK_S:
        del stable["created"]
    return stable
