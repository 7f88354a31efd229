"""The server's own settings for LLM judges: credentials, endpoints, limits, retries, prices.

They come from the server's environment and an optional config file, never from a job spec, so
a client can neither see nor choose the keys it spends. PROVIDERS.md documents every key.
"""

from __future__ import annotations

import json
import os
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from tierank.server.judges.prices import DEFAULT_PRICES, Price, find_price

PROVIDERS = ("openai", "anthropic", "gemini", "openai-compatible")
CONFIG_PATH_ENV = "TIERANK_JUDGES_CONFIG"


@dataclass(frozen=True)
class RateLimit:
    """At most `requests` calls and `tokens` tokens per `period_s` (a minute, as providers
    state RPM and TPM). None leaves that dimension unlimited."""

    requests: float | None = None
    tokens: float | None = None
    period_s: float = 60.0


@dataclass(frozen=True)
class RetryPolicy:
    """Our one retry loop (the SDKs' own retries are off)."""

    max_attempts: int = 4
    base_delay_s: float = 0.5
    max_delay_s: float = 20.0
    # A Retry-After longer than this is not waited for: the call fails as rate limited.
    max_retry_after_s: float = 60.0


@dataclass(frozen=True)
class BreakerPolicy:
    failure_threshold: int = 5
    cooldown_s: float = 30.0


@dataclass(frozen=True)
class ProviderSettings:
    api_key: str | None = None
    base_url: str | None = None
    max_concurrency: int = 16
    timeout_s: float = 60.0
    # Applies to each model of this provider that has no entry in JudgeSettings.rate_limits.
    rate_limit: RateLimit | None = None
    retry: RetryPolicy = RetryPolicy()
    breaker: BreakerPolicy = BreakerPolicy()


@dataclass(frozen=True)
class JudgeSettings:
    providers: Mapping[str, ProviderSettings] = field(default_factory=dict)
    # Keyed "provider/model" (exact model name).
    rate_limits: Mapping[str, RateLimit] = field(default_factory=dict)
    # Keyed "provider/model-prefix"; see prices.find_price.
    prices: Mapping[str, Price] = field(default_factory=lambda: dict(DEFAULT_PRICES))

    def provider(self, name: str) -> ProviderSettings:
        return self.providers.get(name, ProviderSettings())

    def rate_limit(self, provider: str, model: str) -> RateLimit | None:
        return self.rate_limits.get(f"{provider}/{model}", self.provider(provider).rate_limit)

    def price(self, provider: str, model: str) -> Price | None:
        return find_price(self.prices, provider, model)

    @classmethod
    def load(
        cls, environ: Mapping[str, str] | None = None, config_path: str | Path | None = None
    ) -> JudgeSettings:
        """Defaults, then the config file (`config_path` or $TIERANK_JUDGES_CONFIG), then the
        environment's credentials and base URLs, each overriding the one before."""
        environ = os.environ if environ is None else environ
        path = config_path or environ.get(CONFIG_PATH_ENV)
        settings = from_mapping(read_config_file(Path(path))) if path else cls()
        return apply_environment(settings, environ)


# Environment variables, in order of preference, for each provider's key and base URL.
_KEY_ENV: Mapping[str, tuple[str, ...]] = {
    "openai": ("OPENAI_API_KEY",),
    "anthropic": ("ANTHROPIC_API_KEY",),
    "gemini": ("GEMINI_API_KEY", "GOOGLE_API_KEY"),
    "openai-compatible": ("TIERANK_OPENAI_COMPATIBLE_API_KEY",),
}
_BASE_URL_ENV: Mapping[str, tuple[str, ...]] = {
    "openai": ("TIERANK_OPENAI_BASE_URL",),
    "anthropic": ("TIERANK_ANTHROPIC_BASE_URL",),
    "gemini": ("TIERANK_GEMINI_BASE_URL",),
    "openai-compatible": ("TIERANK_OPENAI_COMPATIBLE_BASE_URL",),
}


def _first_set(environ: Mapping[str, str], names: tuple[str, ...]) -> str | None:
    return next((environ[name] for name in names if environ.get(name)), None)


def apply_environment(settings: JudgeSettings, environ: Mapping[str, str]) -> JudgeSettings:
    providers = dict(settings.providers)
    for name in PROVIDERS:
        current = settings.provider(name)
        key = _first_set(environ, _KEY_ENV[name]) or current.api_key
        base_url = _first_set(environ, _BASE_URL_ENV[name]) or current.base_url
        providers[name] = replace(current, api_key=key, base_url=base_url)
    return replace(settings, providers=providers)


def read_config_file(path: Path) -> dict[str, Any]:
    """A `.toml` file, or JSON for any other suffix."""
    text = path.read_text(encoding="utf-8")
    return tomllib.loads(text) if path.suffix == ".toml" else json.loads(text)


def _build(cls: type, data: Mapping[str, Any], where: str) -> Any:
    """A flat dataclass from a mapping, refusing unknown keys so that typos are loud."""
    known = {f.name for f in fields(cls)}
    unknown = set(data) - known
    if unknown:
        raise ValueError(f"{where}: unknown keys {sorted(unknown)}; known: {sorted(known)}")
    return cls(**data)


def _provider_settings(data: Mapping[str, Any], where: str) -> ProviderSettings:
    nested = {
        "rate_limit": lambda v: _build(RateLimit, v, f"{where}.rate_limit"),
        "retry": lambda v: _build(RetryPolicy, v, f"{where}.retry"),
        "breaker": lambda v: _build(BreakerPolicy, v, f"{where}.breaker"),
    }
    flat = {key: nested[key](value) if key in nested else value for key, value in data.items()}
    return _build(ProviderSettings, flat, where)


def from_mapping(data: Mapping[str, Any]) -> JudgeSettings:
    """Settings from a parsed config file (layout in PROVIDERS.md)."""
    unknown = set(data) - {"providers", "rate_limits", "prices"}
    if unknown:
        raise ValueError(f"judge config: unknown sections {sorted(unknown)}")
    providers = {
        name: _provider_settings(value, f"providers.{name}")
        for name, value in data.get("providers", {}).items()
    }
    unknown_providers = set(providers) - set(PROVIDERS)
    if unknown_providers:
        raise ValueError(f"judge config: unknown providers {sorted(unknown_providers)}")
    rate_limits = {
        key: _build(RateLimit, value, f"rate_limits.{key}")
        for key, value in data.get("rate_limits", {}).items()
    }
    prices = dict(DEFAULT_PRICES)
    prices.update(
        {
            key: _build(Price, value, f"prices.{key}")
            for key, value in data.get("prices", {}).items()
        }
    )
    return JudgeSettings(providers=providers, rate_limits=rate_limits, prices=prices)
