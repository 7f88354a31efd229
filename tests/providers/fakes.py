"""Local HTTP servers that speak the LLM providers' wire formats, for testing the real SDKs.

One aiohttp server on 127.0.0.1 (ephemeral port) serves four flavors, each on the path its
SDK calls:

- "openai":            POST /v1/chat/completions          (base_url: url + "/v1")
- "openai-compatible": POST /compat/v1/chat/completions   (base_url: url + "/compat/v1")
- "anthropic":         POST /v1/messages                  (base_url: url)
- "gemini":            POST /v1/models/{model}:generateContent, or /v1beta/... (base_url: url)

Each flavor answers from its own script, a queue of steps (Answer, HttpError, Hang), and falls
back to a responder function when the queue is empty (or to HTTP 500 when it has none). Every
request is recorded with its arrival time so tests can count HTTP requests (the SDKs' own
retries must be off) and read the prompt that was sent.

Prompt caching (`FakeLLMServer.cache_prompts(flavor)`, off by default so that scripted token
counts stay as written) fills in the cached-token fields of each answer the way the vendor
reports them; `PromptCache` says how each one behaves.

The OpenAI-compatible flavor can also behave like a local server (`LocalServer`), as
llama-cpp-python's does: one completion at a time (the rest wait in the server's queue), HTTP
500 naming `json_schema` for a `response_format` it does not support, the request's model name
echoed in answers, and `GET /v1/models` listing the weights it serves.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import re
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from aiohttp import web

from tierank.server.judges.settings import (
    BreakerPolicy,
    JudgeSettings,
    ProviderSettings,
    RetryPolicy,
)

FLAVORS = ("openai", "openai-compatible", "anthropic", "gemini")
# A real model name per flavor, for the judges the provider tests build.
MODELS = {
    "openai": "gpt-4.1-mini",
    "openai-compatible": "llama3.1:8b",
    "anthropic": "claude-haiku-4-5",
    "gemini": "gemini-2.5-flash",
}
# Flavors whose judges answer in JSON by default.
JSON_FLAVORS = {"openai", "gemini"}


@dataclass(frozen=True)
class Answer:
    """A successful completion. Token counts follow our normalisation: `input_tokens` counts
    every prompt token, cached ones included; the fake renders each provider's own fields."""

    text: str
    truncated: bool = False
    input_tokens: int = 120
    output_tokens: int = 12
    cached_input_tokens: int = 0
    # Anthropic only: prompt tokens written to the cache.
    cache_write_tokens: int = 0
    # Sent in pieces as it is rendered, without Content-Length (as a server streaming a
    # runaway answer), so the fake never holds the whole body either.
    streamed: bool = False


@dataclass(frozen=True)
class HttpError:
    status: int
    headers: Mapping[str, str] = field(default_factory=dict)
    message: str = "scripted error"
    # Gemini only: google.rpc detail objects for the error body (e.g. RetryInfo).
    details: tuple[Mapping[str, Any], ...] = ()


@dataclass(frozen=True)
class Hang:
    """Waits `seconds` (or until the server stops, or `released` is set), then plays `then`
    (default: HTTP 504)."""

    seconds: float = 30.0
    then: Answer | HttpError | None = None
    released: asyncio.Event | None = None


@dataclass(frozen=True)
class Drop:
    """Closes the connection without an answer, as a server that crashed mid-request."""


Step = Answer | HttpError | Hang | Drop


@dataclass
class LocalServer:
    """How the OpenAI-compatible flavor behaves when it plays a local model server.

    `models`: the entries of `GET /compat/v1/models` (None: 404, as a server without it);
    `refused_formats`: response_format types answered with HTTP 500 naming them, as
    llama-cpp-python answers `json_schema`; `one_at_a_time`: completions are served one after
    another, in arrival order, as llama.cpp with one slot serves them, and the model list waits
    for the slot too (llama-cpp-python's `/v1/models` takes the model's lock, as every route
    that reads the model does), so a busy server answers it only once its completion is done.
    """

    models: list[dict[str, Any]] | None = None
    # An HTTP status `GET /compat/v1/models` answers with instead of the list (a busy server).
    models_error: int | None = None
    # A body (content type, text) `GET /compat/v1/models` answers 200 with instead of the list:
    # no model list at all, as a proxy's or a half-started server's page.
    models_body: tuple[str, str] | None = None
    refused_formats: frozenset[str] = frozenset({"json_schema"})
    one_at_a_time: bool = True
    # Arrival and finish times of each completion, for measuring queueing.
    served: list[tuple[float, float]] = field(default_factory=list)


def llama_cpp_python(model_path: str = "/models/qwen2.5-0.5b-instruct-q4_k_m.gguf") -> LocalServer:
    """llama-cpp-python's server: its one model listed under its path, owned by "me"."""
    return LocalServer(
        models=[{"id": model_path, "object": "model", "owned_by": "me", "permissions": []}]
    )


@dataclass(frozen=True)
class Recorded:
    flavor: str
    path: str
    headers: Mapping[str, str]
    body: dict[str, Any]
    at: float  # time.monotonic() on arrival

    @property
    def messages(self) -> list[tuple[str, str]]:
        """(role, text) of each message, roles as "user" / "assistant" for every flavor."""
        if self.flavor == "gemini":
            return [
                (
                    "assistant" if content.get("role") == "model" else "user",
                    "".join(part.get("text", "") for part in content.get("parts", [])),
                )
                for content in self.body.get("contents", [])
            ]
        return [(m["role"], _content_text(m["content"])) for m in self.body.get("messages", [])]

    @property
    def prompt(self) -> str:
        """The first user message: the rendered ranking prompt."""
        return self.messages[0][1]


def _content_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    return "".join(block.get("text", "") for block in content)


Responder = Callable[[Recorded], Step]

# Every token count the fake makes: 4 characters per token, as rank_by_score counts.
FAKE_CHARS_PER_TOKEN = 4


def fake_tokens(text: str) -> int:
    return math.ceil(len(text) / FAKE_CHARS_PER_TOKEN)


@dataclass
class PromptCache:
    """One account's prompt cache at one vendor, as the vendor documents it (read 2026-11-28):

    - "openai" (Prompt caching guide; "Prompt Caching 201" cookbook): automatic, no marks; a
      prompt of 1,024 tokens or more whose start repeats a prompt seen within the TTL has
      that common prefix served from cache, counted in steps of 128 tokens (1,024, 1,152, ...)
      in `usage.prompt_tokens_details.cached_tokens`, which `prompt_tokens` includes.
    - "anthropic" (Prompt caching, "cache limitations"): only the prefix up to a content block
      marked `cache_control` is cached, and only when it is at least the model's minimum
      (`anthropic_min_tokens`); a marked prefix below it is processed uncached with no error.
      The first call writes it (`cache_creation_input_tokens`), calls within the TTL (5
      minutes, refreshed by each hit) read it (`cache_read_input_tokens`); neither is part of
      `input_tokens`, which counts only what follows the cached prefix.
    - "gemini" (Context caching, implicit caching): automatic on Gemini 2.5 and later; a
      repeated prefix of at least the model's minimum (`gemini_min_tokens`) is served from
      cache, reported in `usageMetadata.cachedContentTokenCount`, which `promptTokenCount`
      includes.

    Prompts are remembered when they arrive. The real services only cache a prefix once a
    request carrying it has been processed (and OpenAI only on the machine a request is routed
    to), so calls sent at the same moment may all miss; the fake is the optimistic case.
    """

    flavor: str
    ttl_s: float = 300.0
    openai_min_tokens: int = 1024
    openai_step_tokens: int = 128
    anthropic_min_tokens: Mapping[str, int] = field(
        default_factory=lambda: {"claude-haiku-4-5": 4096, "claude-sonnet-4-6": 1024}
    )
    gemini_min_tokens: Mapping[str, int] = field(
        default_factory=lambda: {"gemini-2.5-flash": 2048, "gemini-2.5-pro": 2048}
    )
    # prefix text -> when it was last used
    _seen: dict[str, float] = field(default_factory=dict)

    def apply(self, request: Recorded, answer: Answer, model: str) -> Answer:
        now = time.monotonic()
        self._seen = {text: at for text, at in self._seen.items() if now - at < self.ttl_s}
        if self.flavor == "anthropic":
            return self._anthropic(request, answer, model, now)
        text = "".join(f"{role}:{content}\n" for role, content in request.messages)
        common = max((_common_prefix(text, seen) for seen in self._seen), default=0)
        self._seen[text] = now
        cached = min(common // FAKE_CHARS_PER_TOKEN, answer.input_tokens)
        if self.flavor == "gemini":
            minimum = self.gemini_min_tokens.get(model, 2048)
            cached = cached if cached >= minimum else 0
        else:
            if answer.input_tokens < self.openai_min_tokens:
                cached = 0
            cached = cached // self.openai_step_tokens * self.openai_step_tokens
            cached = cached if cached >= self.openai_min_tokens else 0
        return replace(answer, cached_input_tokens=cached)

    def _anthropic(self, request: Recorded, answer: Answer, model: str, now: float) -> Answer:
        prefix = _marked_prefix(request.body.get("messages", []))
        tokens = fake_tokens(prefix) if prefix is not None else 0
        if prefix is None or tokens < self.anthropic_min_tokens.get(model, 4096):
            return answer
        tokens = min(tokens, answer.input_tokens)
        if prefix in self._seen:
            self._seen[prefix] = now
            return replace(answer, cached_input_tokens=tokens)
        self._seen[prefix] = now
        return replace(answer, cache_write_tokens=tokens)


def _common_prefix(a: str, b: str) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def _marked_prefix(messages: list[dict[str, Any]]) -> str | None:
    """The text up to and including the last block marked cache_control; None if none is."""
    text, marked = "", None
    for message in messages:
        content = message.get("content")
        blocks = [{"text": content}] if isinstance(content, str) else content
        for block in blocks:
            text += block.get("text", "")
            if block.get("cache_control"):
                marked = text
    return marked


class FakeLLMServer:
    def __init__(self) -> None:
        self._scripts: dict[str, deque[Step]] = {flavor: deque() for flavor in FLAVORS}
        self._responders: dict[str, Responder] = {}
        self._requests: dict[str, list[Recorded]] = {flavor: [] for flavor in FLAVORS}
        self._stopping = asyncio.Event()
        self._runner: web.AppRunner | None = None
        self.url = ""
        self.local: LocalServer | None = None
        self._one_at_a_time = asyncio.Lock()
        self.model_listings = 0
        self._caches: dict[str, PromptCache] = {}

    # -- scripting ------------------------------------------------------------------------------

    def script(self, flavor: str, *steps: Step) -> None:
        self._scripts[flavor].extend(steps)

    def respond_with(self, flavor: str, responder: Responder) -> None:
        """Answers requests that find the script empty."""
        self._responders[flavor] = responder

    def cache_prompts(self, flavor: str, **behaviour: Any) -> PromptCache:
        """From now on, fill in the flavor's cached-token fields as the vendor would
        (PromptCache), on every answer the script or the responder gives."""
        self._caches[flavor] = PromptCache(flavor, **behaviour)
        return self._caches[flavor]

    def requests(self, flavor: str) -> list[Recorded]:
        return list(self._requests[flavor])

    def base_url(self, flavor: str) -> str:
        return {
            "openai": f"{self.url}/v1",
            "openai-compatible": f"{self.url}/compat/v1",
            "anthropic": self.url,
            "gemini": self.url,
        }[flavor]

    # -- lifecycle ------------------------------------------------------------------------------

    # Request bodies the fake takes, as the services do (an OpenAI batch input file may hold
    # 200 MB, an Anthropic batch 256 MB); aiohttp's own default is 1 MiB.
    max_request_bytes = 256 * 1024 * 1024

    async def start(self) -> FakeLLMServer:
        app = web.Application(client_max_size=self.max_request_bytes)
        app.router.add_post("/v1/chat/completions", self._handler("openai"))
        app.router.add_post("/compat/v1/chat/completions", self._handler("openai-compatible"))
        app.router.add_get("/compat/v1/models", self._list_models)
        app.router.add_post("/v1/messages", self._handler("anthropic"))
        # google-genai calls v1 by default (older releases and GOOGLE_GENAI_API_VERSION: v1beta).
        for version in ("v1", "v1beta"):
            app.router.add_post(
                f"/{version}/models/{{model}}:generateContent", self._handler("gemini")
            )
        self.add_routes(app)
        self._runner = web.AppRunner(app, handle_signals=False, shutdown_timeout=1.0)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self.url = f"http://127.0.0.1:{port}"
        return self

    def add_routes(self, app: web.Application) -> None:
        """More endpoints on the same server (the batch APIs' fake adds its own)."""

    async def stop(self) -> None:
        self._stopping.set()  # releases hanging handlers so shutdown is quick
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def __aenter__(self) -> FakeLLMServer:
        return await self.start()

    async def __aexit__(self, *exc_info: object) -> None:
        await self.stop()

    # -- serving --------------------------------------------------------------------------------

    def _handler(self, flavor: str) -> Callable[[web.Request], Any]:
        async def handle(request: web.Request) -> web.StreamResponse:
            recorded = Recorded(
                flavor=flavor,
                path=request.path,
                headers=dict(request.headers),
                body=await request.json(),
                at=time.monotonic(),
            )
            self._requests[flavor].append(recorded)
            if flavor == "openai-compatible" and self.local is not None:
                return await self._serve_locally(self.local, recorded, request)
            step = self._next_step(flavor, recorded)
            if isinstance(step, Drop):
                assert request.transport is not None
                request.transport.close()
                return web.Response()
            return await self._play(flavor, step, recorded, request)

        return handle

    async def _serve_locally(
        self, local: LocalServer, recorded: Recorded, request: web.Request
    ) -> web.StreamResponse:
        response_format = (recorded.body.get("response_format") or {}).get("type")
        if response_format in local.refused_formats:
            # llama-cpp-python's answer to a response_format it does not know.
            message = f"Unsupported response_format type: '{response_format}'"
            return web.json_response(
                {"error": {"message": message, "type": "internal_server_error"}}, status=500
            )
        if not local.one_at_a_time:
            step = self._next_step("openai-compatible", recorded)
            return await self._play("openai-compatible", step, recorded, request)
        async with self._one_at_a_time:
            started = time.monotonic()
            step = self._next_step("openai-compatible", recorded)
            response = await self._play("openai-compatible", step, recorded, request)
            local.served.append((started, time.monotonic()))
            return response

    async def _list_models(self, request: web.Request) -> web.StreamResponse:
        self.model_listings += 1
        if self.local is not None and self.local.one_at_a_time:
            async with self._one_at_a_time:
                return self._model_list()
        return self._model_list()

    def _model_list(self) -> web.StreamResponse:
        if self.local is not None and self.local.models_error is not None:
            return web.json_response({"error": "busy"}, status=self.local.models_error)
        if self.local is not None and self.local.models_body is not None:
            content_type, text = self.local.models_body
            return web.Response(text=text, content_type=content_type)
        if self.local is None or self.local.models is None:
            return web.json_response({"detail": "Not Found"}, status=404)
        return web.json_response({"object": "list", "data": self.local.models})

    def _next_step(self, flavor: str, recorded: Recorded) -> Step:
        if self._scripts[flavor]:
            step = self._scripts[flavor].popleft()
        else:
            responder = self._responders.get(flavor)
            step = responder(recorded) if responder else HttpError(500, message="nothing scripted")
        cache = self._caches.get(flavor)
        if cache is not None and isinstance(step, Answer):
            model = recorded.body.get("model") or recorded.path.split("/")[-1].split(":")[0]
            step = cache.apply(recorded, step, model)
        return step

    async def _play(
        self, flavor: str, step: Step, recorded: Recorded, request: web.Request
    ) -> web.StreamResponse:
        if isinstance(step, Hang):
            ends = [self._stopping.wait()] + ([step.released.wait()] if step.released else [])
            waits = [asyncio.ensure_future(end) for end in ends]
            await asyncio.wait(waits, timeout=step.seconds, return_when=asyncio.FIRST_COMPLETED)
            for wait in waits:
                wait.cancel()
            return await self._play(flavor, step.then or HttpError(504), recorded, request)
        if isinstance(step, HttpError):
            return web.json_response(
                ERROR_BODIES[flavor](step), status=step.status, headers=dict(step.headers)
            )
        model = recorded.body.get("model") or recorded.path.split("/")[-1].split(":")[0]
        if step.streamed:
            return await _stream_answer(request, ANSWER_BODIES[flavor], step, model)
        return web.json_response(ANSWER_BODIES[flavor](step, model))


_TEXT_MARK = "@@answer-text@@"
_STREAM_PIECE_CHARS = 64 * 1024


async def _stream_answer(
    request: web.Request,
    render: Callable[[Answer, str], dict[str, Any]],
    answer: Answer,
    model: str,
) -> web.StreamResponse:
    head, tail = json.dumps(render(replace(answer, text=_TEXT_MARK), model)).split(_TEXT_MARK)
    response = web.StreamResponse(headers={"Content-Type": "application/json"})
    response.enable_chunked_encoding()
    # The client hangs up once it has read enough: that ends the answer, not the test.
    with contextlib.suppress(ConnectionError):
        await response.prepare(request)
        await response.write(head.encode())
        for start in range(0, len(answer.text), _STREAM_PIECE_CHARS):
            piece = answer.text[start : start + _STREAM_PIECE_CHARS]
            await response.write(json.dumps(piece)[1:-1].encode())
        await response.write(tail.encode())
        await response.write_eof()
    return response


# -- wire formats ---------------------------------------------------------------------------------


def openai_answer(answer: Answer, model: str) -> dict[str, Any]:
    return {
        "id": "chatcmpl-fake",
        "object": "chat.completion",
        "created": 0,
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": answer.text},
                "finish_reason": "length" if answer.truncated else "stop",
            }
        ],
        "usage": {
            "prompt_tokens": answer.input_tokens,
            "completion_tokens": answer.output_tokens,
            "total_tokens": answer.input_tokens + answer.output_tokens,
            "prompt_tokens_details": {"cached_tokens": answer.cached_input_tokens},
        },
    }


def anthropic_answer(answer: Answer, model: str) -> dict[str, Any]:
    uncached = answer.input_tokens - answer.cached_input_tokens - answer.cache_write_tokens
    return {
        "id": "msg_fake",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": [{"type": "text", "text": answer.text}],
        "stop_reason": "max_tokens" if answer.truncated else "end_turn",
        "stop_sequence": None,
        "usage": {
            "input_tokens": uncached,
            "output_tokens": answer.output_tokens,
            "cache_read_input_tokens": answer.cached_input_tokens,
            "cache_creation_input_tokens": answer.cache_write_tokens,
        },
    }


def gemini_answer(answer: Answer, model: str) -> dict[str, Any]:
    return {
        "candidates": [
            {
                "content": {"role": "model", "parts": [{"text": answer.text}]},
                "finishReason": "MAX_TOKENS" if answer.truncated else "STOP",
                "index": 0,
            }
        ],
        "usageMetadata": {
            "promptTokenCount": answer.input_tokens,
            "candidatesTokenCount": answer.output_tokens,
            "cachedContentTokenCount": answer.cached_input_tokens,
            "totalTokenCount": answer.input_tokens + answer.output_tokens,
        },
        "modelVersion": model,
    }


_GOOGLE_STATUS = {
    429: "RESOURCE_EXHAUSTED",
    500: "INTERNAL",
    503: "UNAVAILABLE",
    400: "INVALID_ARGUMENT",
}


def openai_error(error: HttpError) -> dict[str, Any]:
    return {"error": {"message": error.message, "type": "fake_error", "code": str(error.status)}}


def anthropic_error(error: HttpError) -> dict[str, Any]:
    return {"type": "error", "error": {"type": "fake_error", "message": error.message}}


def gemini_error(error: HttpError) -> dict[str, Any]:
    status = _GOOGLE_STATUS.get(error.status, "UNKNOWN")
    body = {"code": error.status, "message": error.message, "status": status}
    if error.details:
        body["details"] = [dict(detail) for detail in error.details]
    return {"error": body}


ANSWER_BODIES: Mapping[str, Callable[[Answer, str], dict[str, Any]]] = {
    "openai": openai_answer,
    "openai-compatible": openai_answer,
    "anthropic": anthropic_answer,
    "gemini": gemini_answer,
}
ERROR_BODIES: Mapping[str, Callable[[HttpError], dict[str, Any]]] = {
    "openai": openai_error,
    "openai-compatible": openai_error,
    "anthropic": anthropic_error,
    "gemini": gemini_error,
}


# Tiny backoff so retries cost milliseconds; Retry-After values still apply in full.
FAST_RETRY = RetryPolicy(max_attempts=3, base_delay_s=0.01, max_delay_s=0.05, max_retry_after_s=5)


def provider_settings(server: FakeLLMServer, **overrides: Mapping[str, Any]) -> dict[str, Any]:
    """The `providers` table of a judges config file with every provider at `server`: fast
    retries, a lenient breaker, and `overrides` by provider."""
    return {
        flavor: {
            "base_url": server.base_url(flavor),
            "api_key": "test-key",
            "timeout_s": 5.0,
            "retry": {"max_attempts": 3, "base_delay_s": 0.01, "max_delay_s": 0.05},
            "breaker": {"failure_threshold": 100, "cooldown_s": 60.0},
            **overrides.get(flavor, {}),
        }
        for flavor in FLAVORS
    }


def settings_for(server: FakeLLMServer, **provider_overrides: Any) -> JudgeSettings:
    """Judge settings with every provider pointed at `server`, fast retries, a lenient breaker."""
    defaults: dict[str, Any] = {
        "api_key": "test-key",
        "timeout_s": 5.0,
        "retry": FAST_RETRY,
        "breaker": BreakerPolicy(failure_threshold=100, cooldown_s=60.0),
    }
    providers = {
        flavor: ProviderSettings(
            base_url=server.base_url(flavor), **{**defaults, **provider_overrides}
        )
        for flavor in FLAVORS
    }
    return JudgeSettings(providers=providers)


# -- a responder that ranks ----------------------------------------------------------------------

_PASSAGE_LINE = re.compile(r"^\[(\d+)\] .*?\bscore (\d+)\b", re.MULTILINE)


def rank_by_score(request: Recorded) -> Answer:
    """Ranks the prompt's passages by the `score N` written in each one's text, in the answer
    form the prompt asks for. Usage is the messages at 4 characters per token."""
    shown = [(int(number), int(score)) for number, score in _PASSAGE_LINE.findall(request.prompt)]
    return ranking_answer(request, [number for number, _ in sorted(shown, key=lambda s: -s[1])])


def ranking_answer(request: Recorded, numbers: list[int]) -> Answer:
    """`numbers` (passage numbers, best first) in the answer form the prompt asks for; usage is
    the messages at 4 characters per token."""
    if "Answer with JSON only" in request.prompt:
        text = json.dumps({"ranking": numbers})
    else:
        text = " > ".join(f"[{n}]" for n in numbers)
    input_tokens = sum(fake_tokens(text) for _, text in request.messages)
    return Answer(text, input_tokens=input_tokens, output_tokens=fake_tokens(text))
