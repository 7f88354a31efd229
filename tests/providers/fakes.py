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
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from tierank.server.judges.settings import (
    BreakerPolicy,
    JudgeSettings,
    ProviderSettings,
    RetryPolicy,
)

FLAVORS = ("openai", "openai-compatible", "anthropic", "gemini")


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


@dataclass(frozen=True)
class HttpError:
    status: int
    headers: Mapping[str, str] = field(default_factory=dict)
    message: str = "scripted error"
    # Gemini only: google.rpc detail objects for the error body (e.g. RetryInfo).
    details: tuple[Mapping[str, Any], ...] = ()


@dataclass(frozen=True)
class Hang:
    """Waits `seconds` (or until the server stops), then plays `then` (default: HTTP 504)."""

    seconds: float = 30.0
    then: Answer | HttpError | None = None


Step = Answer | HttpError | Hang


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


class FakeLLMServer:
    def __init__(self) -> None:
        self._scripts: dict[str, deque[Step]] = {flavor: deque() for flavor in FLAVORS}
        self._responders: dict[str, Responder] = {}
        self._requests: dict[str, list[Recorded]] = {flavor: [] for flavor in FLAVORS}
        self._stopping = asyncio.Event()
        self._runner: web.AppRunner | None = None
        self.url = ""

    # -- scripting ------------------------------------------------------------------------------

    def script(self, flavor: str, *steps: Step) -> None:
        self._scripts[flavor].extend(steps)

    def respond_with(self, flavor: str, responder: Responder) -> None:
        """Answers requests that find the script empty."""
        self._responders[flavor] = responder

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

    async def start(self) -> FakeLLMServer:
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self._handler("openai"))
        app.router.add_post("/compat/v1/chat/completions", self._handler("openai-compatible"))
        app.router.add_post("/v1/messages", self._handler("anthropic"))
        # google-genai calls v1 by default (older releases and GOOGLE_GENAI_API_VERSION: v1beta).
        for version in ("v1", "v1beta"):
            app.router.add_post(
                f"/{version}/models/{{model}}:generateContent", self._handler("gemini")
            )
        self._runner = web.AppRunner(app, handle_signals=False, shutdown_timeout=1.0)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self.url = f"http://127.0.0.1:{port}"
        return self

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
            return await self._play(flavor, self._next_step(flavor, recorded), recorded)

        return handle

    def _next_step(self, flavor: str, recorded: Recorded) -> Step:
        if self._scripts[flavor]:
            return self._scripts[flavor].popleft()
        responder = self._responders.get(flavor)
        return responder(recorded) if responder else HttpError(500, message="nothing scripted")

    async def _play(self, flavor: str, step: Step, recorded: Recorded) -> web.StreamResponse:
        if isinstance(step, Hang):
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stopping.wait(), step.seconds)
            return await self._play(flavor, step.then or HttpError(504), recorded)
        if isinstance(step, HttpError):
            return web.json_response(
                ERROR_BODIES[flavor](step), status=step.status, headers=dict(step.headers)
            )
        model = recorded.body.get("model") or recorded.path.split("/")[-1].split(":")[0]
        return web.json_response(ANSWER_BODIES[flavor](step, model))


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
