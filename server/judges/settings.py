"""The server's own settings for LLM judges: credentials, endpoints, limits, retries, prices.

They come from the server's environment and an optional config file, never from a job spec, so
a client can neither see nor choose the keys it spends. PROVIDERS.md documents every key.
"""

from __future__ import annotations

import json
import os
import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import MISSING, dataclass, field, fields, is_dataclass, replace
from pathlib import Path
from types import UnionType
from typing import Any, get_args, get_type_hints

from tierank.server.judges.prices import DEFAULT_PRICES, Price, find_price
from tierank.server.judges.providers import PROVIDERS, PROVIDERS_BY_NAME

CONFIG_PATH_ENV = "TIERANK_JUDGES_CONFIG"
_SECTIONS = ("batches", "prices", "providers", "rate_limits")


class JudgeSettingsError(ValueError):
    """A judges config file that cannot be used; the message is one line naming the file and
    what is wrong in it (the key, and the keys known there)."""


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
    # The most time one request and its retries may take, in flight and waiting between
    # attempts (not waiting for a slot): a retry's timeout is cut to what is left, and no retry
    # is sent once it is spent. It never cuts a first attempt, so a longer timeout_s (the job's
    # or the provider's) is one attempt. So a call to an endpoint that never answers fails
    # within 2 minutes, not timeout_s x max_attempts (40 minutes for a local server).
    max_elapsed_s: float = 120.0


@dataclass(frozen=True)
class BreakerPolicy:
    failure_threshold: int = 5
    cooldown_s: float = 30.0


@dataclass(frozen=True)
class ProviderSettings:
    # Kept out of repr(): no log line or traceback that shows the settings shows the key.
    api_key: str | None = field(default=None, repr=False)
    base_url: str | None = None
    max_concurrency: int = 16
    timeout_s: float = 60.0
    # Applies to each model of this provider that has no entry in JudgeSettings.rate_limits.
    rate_limit: RateLimit | None = None
    retry: RetryPolicy = RetryPolicy()
    breaker: BreakerPolicy = BreakerPolicy()
    # openai-compatible only: False never serves this endpoint's verdicts from the cache (for a
    # server that reports nothing that changes with its weights).
    cache_verdicts: bool = True


@dataclass(frozen=True)
class BatchSettings:
    """How judges in batch mode (`mode=batch`) gather, submit and follow provider batches.
    Vendors answer a batch in minutes to hours (most within an hour), so the first poll is
    soon and later ones spread out."""

    # A wave is gathered until no call has come for this long (every live job of a study plans
    # its next calls within moments of the last batch's answers), or for at most max_gather_s.
    gather_s: float = 5.0
    max_gather_s: float = 60.0
    first_poll_s: float = 30.0
    max_poll_s: float = 600.0
    poll_multiplier: float = 1.5
    # Each wait is drawn from [1 - jitter, 1] of its nominal value, so replicas and studies
    # that started together do not poll together.
    poll_jitter: float = 0.25
    # One replica polls a batch at a time, under a lease that lasts this long past its next
    # poll (renewed at each poll); the others read what it recorded, and take the polling
    # over once a lease has run out.
    poll_lease_s: float = 120.0
    # A batch journaled but without a vendor id for this long was cut off mid-submission (a
    # crash): its vendor's own batches are searched for it before its calls are asked again.
    submit_grace_s: float = 300.0
    # A call whose batch expired (or was cancelled by someone else) is put in a later batch,
    # up to this many batches in all; then it fails like a timed-out call.
    max_tries: int = 3
    # A batch whose creation the vendor refuses with a 429, a 5xx or a timeout is submitted
    # again with the polls' backoff (and at least its Retry-After) for up to this long: a
    # vendor's outage lasts minutes. Then its calls fail with the vendor's message.
    submit_retry_s: float = 900.0


@dataclass(frozen=True)
class JudgeSettings:
    providers: Mapping[str, ProviderSettings] = field(default_factory=dict)
    # Keyed "provider/model" (exact model name).
    rate_limits: Mapping[str, RateLimit] = field(default_factory=dict)
    # Keyed "provider/model-prefix"; see prices.find_price.
    prices: Mapping[str, Price] = field(default_factory=lambda: dict(DEFAULT_PRICES))
    batches: BatchSettings = BatchSettings()

    def provider(self, name: str) -> ProviderSettings:
        return self.providers.get(name, provider_defaults(name))

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
        settings = cls()
        if path:
            try:
                settings = from_mapping(read_config_file(Path(path)))
            except ValueError as error:
                raise JudgeSettingsError(f"judges config {path}: {error}") from None
        return apply_environment(settings, environ)


# A server of one's own (llama.cpp, llama-cpp-python, a single-slot vLLM, Ollama) usually
# answers one request at a time, slowly: concurrent requests would only queue there, each
# eating its own timeout. So one request in flight, and a timeout measured from sending that
# is a call's whole time: a request it left unanswered would be no sooner answered again, and
# a retry would keep the calls queued behind it waiting. A slower model needs a longer one.
LOCAL_SERVER_DEFAULTS = ProviderSettings(max_concurrency=1, timeout_s=RetryPolicy().max_elapsed_s)


def provider_defaults(name: str) -> ProviderSettings:
    return LOCAL_SERVER_DEFAULTS if name == "openai-compatible" else ProviderSettings()


def _first_set(environ: Mapping[str, str], names: tuple[str, ...]) -> str | None:
    return next((environ[name] for name in names if environ.get(name)), None)


def apply_environment(settings: JudgeSettings, environ: Mapping[str, str]) -> JudgeSettings:
    providers = dict(settings.providers)
    for name, described in PROVIDERS_BY_NAME.items():
        current = settings.provider(name)
        key = _first_set(environ, described.key_variables) or current.api_key
        base_url = environ.get(described.base_url_variable) or current.base_url
        providers[name] = replace(current, api_key=key, base_url=base_url)
    return replace(settings, providers=providers)


def read_config_file(path: Path) -> Mapping[str, Any]:
    """A `.toml` file, or JSON for any other suffix; errors as one line, without the path."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ValueError("no such file") from None
    except (OSError, UnicodeDecodeError) as error:
        raise ValueError(f"cannot be read ({error.__class__.__name__.lower()})") from None
    try:
        data = tomllib.loads(text) if path.suffix == ".toml" else json.loads(text)
    except tomllib.TOMLDecodeError as error:
        raise ValueError(f"not valid TOML: {_one_line(error)}") from None
    except json.JSONDecodeError as error:
        raise ValueError(f"not valid JSON: {_one_line(error)}") from None
    return _table(data, "the file")


def _one_line(error: Exception) -> str:
    return " ".join(str(error).split())


def _table(value: Any, where: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise ValueError(f"{where} must be a table, not {type(value).__name__}")
    return value


def _check_keys(data: Mapping[str, Any], known: Iterable[str], where: str) -> None:
    names = sorted(known)
    unknown = sorted(set(data) - set(names))
    if unknown:
        name = f"{where}.{unknown[0]}" if where else unknown[0]
        raise ValueError(f"unknown key {name!r}; known keys there: {', '.join(names)}")


def _build(cls: type, data: Any, where: str, base: Any = None) -> Any:
    """A flat dataclass from a mapping, refusing unknown keys so that typos are loud, and
    values of the wrong type so that they fail here rather than in the first job."""
    data = _table(data, where)
    _check_keys(data, (f.name for f in fields(cls)), where)
    hints = get_type_hints(cls)
    for key, value in data.items():
        if not _accepts(hints[key], value):
            raise ValueError(f"{where}.{key} must be {_type_name(hints[key])}, not {value!r:.40}")
    missing = [f.name for f in fields(cls) if f.default is MISSING and f.name not in data]
    if base is None and missing:
        raise ValueError(f"{where} needs {', '.join(missing)}")
    return replace(base, **data) if base is not None else cls(**data)


def _options(hint: Any) -> tuple[Any, ...]:
    return get_args(hint) if isinstance(hint, UnionType) else (hint,)


def _accepts(hint: Any, value: Any) -> bool:
    return any(_accepts_one(option, value) for option in _options(hint))


def _accepts_one(option: Any, value: Any) -> bool:
    if value is None or isinstance(value, bool):
        return option is type(value)
    if option is float:
        return isinstance(value, int | float)
    return isinstance(value, option) if option in (int, str) or is_dataclass(option) else False


def _type_name(hint: Any) -> str:
    names = {int: "an integer", float: "a number", str: "a string", bool: "true or false"}
    wanted = [names.get(o, "a table") for o in _options(hint) if o is not type(None)]
    return " or ".join(wanted)


def _provider_settings(name: str, data: Any) -> ProviderSettings:
    where = f"providers.{name}"
    nested = {
        "rate_limit": lambda v: _build(RateLimit, v, f"{where}.rate_limit"),
        "retry": lambda v: _build(RetryPolicy, v, f"{where}.retry"),
        "breaker": lambda v: _build(BreakerPolicy, v, f"{where}.breaker"),
    }
    data = _table(data, where)
    flat = {key: nested[key](value) if key in nested else value for key, value in data.items()}
    return _build(ProviderSettings, flat, where, base=provider_defaults(name))


def from_mapping(data: Mapping[str, Any]) -> JudgeSettings:
    """Settings from a parsed config file (layout in PROVIDERS.md)."""
    _check_keys(data, _SECTIONS, "")
    providers_data = _table(data.get("providers", {}), "providers")
    _check_keys(providers_data, PROVIDERS, "providers")
    providers = {name: _provider_settings(name, value) for name, value in providers_data.items()}
    rate_limits = {
        key: _build(RateLimit, value, f"rate_limits.{key}")
        for key, value in _table(data.get("rate_limits", {}), "rate_limits").items()
    }
    prices = dict(DEFAULT_PRICES)
    prices.update(
        {
            key: _build(Price, value, f"prices.{key}")
            for key, value in _table(data.get("prices", {}), "prices").items()
        }
    )
    batches = _build(BatchSettings, data.get("batches", {}), "batches", base=BatchSettings())
    return JudgeSettings(
        providers=providers, rate_limits=rate_limits, prices=prices, batches=batches
    )
