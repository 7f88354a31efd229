"""Builds LLM judges, sharing one SDK client, one breaker and the limiters per provider.

Each provider's module (and so its SDK) is imported when its first judge is built: the three
SDKs take seconds to import, which every server start, `--help` and embedded CLI server paid
although most servers use one provider or none.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from tierank.server.judges.base import Judge, JudgeConfig, JudgeConfigError, PoolContext
from tierank.server.judges.limits import ProviderLimits
from tierank.server.judges.llm import ProviderShared
from tierank.server.judges.settings import JudgeSettings, ProviderSettings

if TYPE_CHECKING:
    from tierank.server.judges.openai_judges import ResponseFormats

# Local servers usually ignore the key, but the SDK refuses an empty one.
PLACEHOLDER_API_KEY = "not-needed"
_KEY_HINT = {
    "openai": "OPENAI_API_KEY",
    "anthropic": "ANTHROPIC_API_KEY",
    "gemini": "GEMINI_API_KEY or GOOGLE_API_KEY",
}


class LLMProviders:
    def __init__(self, settings: JudgeSettings) -> None:
        self.settings = settings
        self.limits = ProviderLimits(settings)
        self._shared: dict[str, ProviderShared] = {}
        self._clients: dict[str, Any] = {}
        self._closers: list[Callable[[], Awaitable[None]]] = []
        # What the one openai-compatible endpoint accepts as response_format, once learned.
        self._compatible_formats: ResponseFormats | None = None

    def builders(self) -> dict[str, Callable[[JudgeConfig, PoolContext], Judge]]:
        return {
            "openai": self._build_openai,
            "anthropic": self._build_anthropic,
            "gemini": self._build_gemini,
            "openai-compatible": self._build_openai_compatible,
        }

    def shared(self, provider: str) -> ProviderShared:
        if provider not in self._shared:
            self._shared[provider] = ProviderShared(provider, self.settings, self.limits)
        return self._shared[provider]

    async def aclose(self) -> None:
        closers, self._closers = self._closers, []
        self._clients.clear()
        for close in closers:
            await close()

    def _client(
        self,
        provider: str,
        make: Callable[[ProviderSettings], Any],
        close: Callable[[Any], Awaitable[None]],
    ) -> Any:
        if provider not in self._clients:
            client = make(self.settings.provider(provider))
            self._clients[provider] = client
            self._closers.append(lambda: close(client))
        return self._clients[provider]

    def _api_key(self, provider: str) -> str:
        key = self.settings.provider(provider).api_key
        if not key:
            raise JudgeConfigError(
                "provider", f"{provider} judges need {_KEY_HINT[provider]} in the server's settings"
            )
        return key

    def _build_openai(self, config: JudgeConfig, pool: PoolContext) -> Judge:
        from tierank.server.judges.openai_judges import OpenAIJudge, make_openai_client

        client = self._client(
            "openai",
            lambda s: make_openai_client(self._api_key("openai"), s.base_url),
            lambda c: c.close(),
        )
        return OpenAIJudge(config, self.shared("openai"), client)

    def _build_openai_compatible(self, config: JudgeConfig, pool: PoolContext) -> Judge:
        from tierank.server.judges.openai_judges import (
            OpenAICompatibleJudge,
            ResponseFormats,
            make_openai_client,
        )

        def make(settings: ProviderSettings) -> Any:
            if not settings.base_url:
                raise JudgeConfigError(
                    "provider",
                    "openai-compatible judges need TIERANK_OPENAI_COMPATIBLE_BASE_URL "
                    "in the server's settings",
                )
            return make_openai_client(settings.api_key or PLACEHOLDER_API_KEY, settings.base_url)

        client = self._client("openai-compatible", make, lambda c: c.close())
        if self._compatible_formats is None:
            self._compatible_formats = ResponseFormats()
        return OpenAICompatibleJudge(
            config, self.shared("openai-compatible"), client, self._compatible_formats
        )

    def _build_anthropic(self, config: JudgeConfig, pool: PoolContext) -> Judge:
        from tierank.server.judges.anthropic_judge import AnthropicJudge, make_anthropic_client

        client = self._client(
            "anthropic",
            lambda s: make_anthropic_client(self._api_key("anthropic"), s.base_url),
            lambda c: c.close(),
        )
        return AnthropicJudge(config, self.shared("anthropic"), client)

    def _build_gemini(self, config: JudgeConfig, pool: PoolContext) -> Judge:
        from tierank.server.judges.gemini_judge import GeminiClient, GeminiJudge

        client = self._client(
            "gemini",
            lambda s: GeminiClient(self._api_key("gemini"), s.base_url),
            lambda c: c.aclose(),
        )
        return GeminiJudge(config, self.shared("gemini"), client)
