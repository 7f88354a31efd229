"""Token prices and the cost of one call.

Prices are USD per 1M tokens. The defaults below were copied from the providers' public price
pages; they are defaults, verify them against the provider's page and override them in the
server's judge config (see PROVIDERS.md) when they change.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from tierank.server.judges.providers import PROVIDERS_BY_NAME


@dataclass(frozen=True)
class Price:
    """USD per 1M tokens. `cache_write` (Anthropic cache creation) defaults to `input`."""

    input: float
    cached_input: float
    output: float
    cache_write: float | None = None


@dataclass(frozen=True)
class TokenCounts:
    """One call's tokens as the provider reported them, normalised across providers.

    `input` counts every prompt token, cached or not; `cached_input` (read from the provider's
    prompt cache) and `cache_write` (written to it) are subsets of `input`.
    """

    input: int = 0
    output: int = 0
    cached_input: int = 0
    cache_write: int = 0

    def __add__(self, other: TokenCounts) -> TokenCounts:
        return TokenCounts(
            input=self.input + other.input,
            output=self.output + other.output,
            cached_input=self.cached_input + other.cached_input,
            cache_write=self.cache_write + other.cache_write,
        )


def cost_usd(tokens: TokenCounts, price: Price | None) -> float:
    """Cost of the tokens; 0.0 for a model without a price (e.g. a local server)."""
    if price is None:
        return 0.0
    write_price = price.input if price.cache_write is None else price.cache_write
    uncached = max(tokens.input - tokens.cached_input - tokens.cache_write, 0)
    total = (
        uncached * price.input
        + tokens.cached_input * price.cached_input
        + tokens.cache_write * write_price
        + tokens.output * price.output
    )
    return total / 1_000_000


def find_price(prices: Mapping[str, Price], provider: str, model: str) -> Price | None:
    """The price for `provider/model`: an exact key, else the longest key that prefixes it.

    Prefix matching lets dated snapshots (`gpt-4.1-2025-04-14`) use their family's price.
    """
    exact = prices.get(f"{provider}/{model}")
    if exact is not None:
        return exact
    matches = [
        (len(key_model), price)
        for key, price in prices.items()
        for key_provider, _, key_model in [key.partition("/")]
        if key_provider == provider and model.startswith(key_model)
    ]
    return max(matches, key=lambda match: match[0])[1] if matches else None


# Defaults, verify against the provider's page. Keys are "provider/model-prefix".
# Prompt-cache prices (`cached_input`, Anthropic's `cache_write`), read 2026-11-28: Anthropic's
# "Model pricing" table (platform.claude.com/docs/en/about-claude/pricing: "Cache hits &
# refreshes" and "5m cache writes", 1.25x input, the TTL tierank's cache_control asks for);
# OpenAI's "Cached input" column (developers.openai.com/api/docs/pricing: a quarter of input for
# GPT-4.1 and o3/o4-mini, a half for GPT-4o, a tenth for GPT-5); Google's "Context caching"
# price for text (ai.google.dev/gemini-api/docs/pricing, which implicit caching hits are charged
# at, with no storage charge). docs/providers.md, "Prompt caching", says when caching pays.
DEFAULT_PRICES: Mapping[str, Price] = {
    "openai/gpt-4.1": Price(input=2.00, cached_input=0.50, output=8.00),
    "openai/gpt-4.1-mini": Price(input=0.40, cached_input=0.10, output=1.60),
    "openai/gpt-4.1-nano": Price(input=0.10, cached_input=0.025, output=0.40),
    "openai/gpt-4o": Price(input=2.50, cached_input=1.25, output=10.00),
    "openai/gpt-4o-mini": Price(input=0.15, cached_input=0.075, output=0.60),
    "openai/o3": Price(input=2.00, cached_input=0.50, output=8.00),
    "openai/o4-mini": Price(input=1.10, cached_input=0.275, output=4.40),
    "openai/gpt-5": Price(input=1.25, cached_input=0.125, output=10.00),
    "openai/gpt-5-mini": Price(input=0.25, cached_input=0.025, output=2.00),
    "openai/gpt-5-nano": Price(input=0.05, cached_input=0.005, output=0.40),
    "anthropic/claude-opus-4": Price(input=15.0, cached_input=1.50, output=75.0, cache_write=18.75),
    "anthropic/claude-opus-4-5": Price(input=5.0, cached_input=0.50, output=25.0, cache_write=6.25),
    "anthropic/claude-sonnet-4": Price(input=3.0, cached_input=0.30, output=15.0, cache_write=3.75),
    "anthropic/claude-sonnet-4-5": Price(
        input=3.0, cached_input=0.30, output=15.0, cache_write=3.75
    ),
    "anthropic/claude-3-7-sonnet": Price(
        input=3.0, cached_input=0.30, output=15.0, cache_write=3.75
    ),
    "anthropic/claude-haiku-4-5": Price(input=1.0, cached_input=0.10, output=5.0, cache_write=1.25),
    "anthropic/claude-3-5-haiku": Price(
        input=0.80, cached_input=0.08, output=4.0, cache_write=1.00
    ),
    "gemini/gemini-2.5-pro": Price(input=1.25, cached_input=0.125, output=10.00),
    "gemini/gemini-2.5-flash": Price(input=0.30, cached_input=0.03, output=2.50),
    "gemini/gemini-2.5-flash-lite": Price(input=0.10, cached_input=0.01, output=0.40),
    "gemini/gemini-2.0-flash": Price(input=0.10, cached_input=0.025, output=0.40),
}


def batch_price(provider: str, price: Price | None) -> Price | None:
    """What `price` (a model's call-by-call price) costs when the call goes in a provider
    batch; None for a model without a price or a provider without batch mode."""
    described = PROVIDERS_BY_NAME.get(provider)
    fraction = described.batch_price_fraction if described is not None else None
    if price is None or fraction is None:
        return None
    return Price(
        input=price.input * fraction,
        cached_input=price.cached_input * fraction,
        output=price.output * fraction,
        cache_write=None if price.cache_write is None else price.cache_write * fraction,
    )
