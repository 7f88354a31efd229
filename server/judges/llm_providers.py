"""Builds LLM judges, sharing one SDK client, one breaker and the limiters per provider and
account: the server's own key, or one tenant's own key (a ProviderAccount).

A tenant's account gets a client, breakers and limiters of its own, so that its failures and
its rate-limit exhaustion never reach other tenants or the server's key, nor theirs it.

Each provider's module (and so its SDK) is imported when its first judge is built: the three
SDKs take seconds to import, which every server start, `--help` and embedded CLI server paid
although most servers use one provider or none.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from tierank.server.judges.accounts import ProviderAccount
from tierank.server.judges.base import JudgeConfig, JudgeConfigError
from tierank.server.judges.limits import ProviderLimits, ReplicaShare
from tierank.server.judges.llm import LLMJudge, ProviderShared
from tierank.server.judges.providers import PROVIDERS, PROVIDERS_BY_NAME
from tierank.server.judges.settings import JudgeSettings, ProviderSettings

if TYPE_CHECKING:
    from tierank.server.judges.openai_judges import ResponseFormats

# Local servers usually ignore the key, but the SDK refuses an empty one.
PLACEHOLDER_API_KEY = "not-needed"
# (provider, tenant): whose key a client and its shared state spend; tenant None: the server's.
Scope = tuple[str, str | None]


def _scope(provider: str, account: ProviderAccount | None) -> Scope:
    return provider, account.tenant if account else None


class LLMProviders:
    def __init__(self, settings: JudgeSettings) -> None:
        self.settings = settings
        # Every limiter's part of the limits, when replicas share them.
        self.share = ReplicaShare()
        # The server's key's limits; each tenant account gets its own (see shared()).
        self.limits = ProviderLimits(settings, self.share)
        self._shared: dict[Scope, ProviderShared] = {}
        # With the account each client was made for: a tenant's key replaced by an admin gets
        # a new client, while jobs already running keep the old one until aclose().
        self._clients: dict[Scope, tuple[ProviderAccount | None, Any]] = {}
        self._closers: list[Callable[[], Awaitable[None]]] = []
        # What the openai-compatible endpoint accepts as response_format, once learned (per
        # account, as what one account's requests teach must not change another's).
        self._compatible_formats: dict[Scope, ResponseFormats] = {}
        self._builders: dict[str, Callable[[JudgeConfig, ProviderAccount | None], LLMJudge]] = {
            "openai": self._build_openai,
            "anthropic": self._build_anthropic,
            "gemini": self._build_gemini,
            "openai-compatible": self._build_openai_compatible,
        }
        assert set(self._builders) == set(PROVIDERS)

    def build(self, config: JudgeConfig, account: ProviderAccount | None = None) -> LLMJudge:
        """A judge of `config.provider` (one of settings.PROVIDERS) on the server's key, or on
        `account`'s key when given."""
        return self._builders[config.provider](config, account)

    def shared(self, provider: str, account: ProviderAccount | None = None) -> ProviderShared:
        scope = _scope(provider, account)
        if scope not in self._shared:
            limits = self.limits if account is None else ProviderLimits(self.settings, self.share)
            shared = ProviderShared(provider, self.settings, limits, scope[1])
            server_key = self.settings.provider(provider).api_key
            if account is None and server_key:
                shared.hide(server_key)
            self._shared[scope] = shared
        shared = self._shared[scope]
        if account is not None:
            shared.hide(account.api_key)
        return shared

    async def aclose(self) -> None:
        closers, self._closers = self._closers, []
        self._clients.clear()
        for close in closers:
            await close()

    def _client(
        self,
        provider: str,
        account: ProviderAccount | None,
        make: Callable[[ProviderSettings], Any],
        close: Callable[[Any], Awaitable[None]],
    ) -> Any:
        scope = _scope(provider, account)
        held = self._clients.get(scope)
        if held is None or held[0] != account:
            client = make(self.settings.provider(provider))
            self._clients[scope] = (account, client)
            self._closers.append(lambda: close(client))
        return self._clients[scope][1]

    def _api_key(self, provider: str, account: ProviderAccount | None) -> str:
        if account is not None:
            return account.api_key
        key = self.settings.provider(provider).api_key
        if not key:
            raise JudgeConfigError(
                "provider",
                f"{provider} judges need {' or '.join(PROVIDERS_BY_NAME[provider].key_variables)}"
                " in the server's settings",
            )
        return key

    def _build_openai(self, config: JudgeConfig, account: ProviderAccount | None) -> LLMJudge:
        from tierank.server.judges.openai_judges import OpenAIJudge, make_openai_client

        client = self._client(
            "openai",
            account,
            lambda s: make_openai_client(self._api_key("openai", account), s.base_url),
            lambda c: c.close(),
        )
        return OpenAIJudge(config, self.shared("openai", account), client)

    def _build_openai_compatible(
        self, config: JudgeConfig, account: ProviderAccount | None
    ) -> LLMJudge:
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
            key = account.api_key if account else settings.api_key or PLACEHOLDER_API_KEY
            return make_openai_client(key, settings.base_url)

        client = self._client("openai-compatible", account, make, lambda c: c.close())
        scope = _scope("openai-compatible", account)
        if scope not in self._compatible_formats:
            self._compatible_formats[scope] = ResponseFormats()
        return OpenAICompatibleJudge(
            config,
            self.shared("openai-compatible", account),
            client,
            self._compatible_formats[scope],
        )

    def _build_anthropic(self, config: JudgeConfig, account: ProviderAccount | None) -> LLMJudge:
        from tierank.server.judges.anthropic_judge import AnthropicJudge, make_anthropic_client

        client = self._client(
            "anthropic",
            account,
            lambda s: make_anthropic_client(self._api_key("anthropic", account), s.base_url),
            lambda c: c.close(),
        )
        return AnthropicJudge(config, self.shared("anthropic", account), client)

    def _build_gemini(self, config: JudgeConfig, account: ProviderAccount | None) -> LLMJudge:
        from tierank.server.judges.gemini_judge import GeminiClient, GeminiJudge

        client = self._client(
            "gemini",
            account,
            lambda s: GeminiClient(self._api_key("gemini", account), s.base_url),
            lambda c: c.aclose(),
        )
        return GeminiJudge(config, self.shared("gemini", account), client)
