"""The LLM providers, each declared once: what the server reads from its environment for it,
whether it has a batch API and at what fraction of the price, which transport carries its
batches, and what OpenTelemetry's GenAI conventions call it. Settings, prices, batch mode,
keys' hints and spans read these; registry.py builds their judges."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass


@dataclass(frozen=True)
class Provider:
    name: str
    # Environment variables of the server's own key, the first one set winning.
    key_variables: tuple[str, ...]
    base_url_variable: str
    # gen_ai.system / gen_ai.provider.name: the conventions' well-known value.
    genai_system: str
    # What a call in a provider batch costs, as a fraction of the same call's price; None: the
    # provider has no batch API.
    batch_price_fraction: float | None = None
    # "module:Class" of its BatchTransport (judges/batches/), imported when first used, as the
    # vendor's SDK is.
    batch_transport: str | None = None


# Batch prices, read on 2026-11-28 (each vendor bills a batch request at a fixed fraction of the
# call-by-call price of the same model, input, output and prompt-cache tokens alike):
# - openai: https://openai.com/api/pricing/ and https://platform.openai.com/docs/guides/batch
#   ("50% cost discount compared to synchronous APIs");
# - anthropic: https://docs.anthropic.com/en/docs/about-claude/pricing#batch-processing ("50%
#   discount on both input and output tokens"; prompt-caching multipliers apply on top);
# - gemini: https://ai.google.dev/gemini-api/docs/batch-api and .../docs/pricing ("50% of the
#   standard cost"; the pricing page's Batch rows are half the Standard rows).
_BATCHES = "tierank.server.judges.batches"
PROVIDERS_BY_NAME: Mapping[str, Provider] = {
    provider.name: provider
    for provider in (
        Provider(
            "openai",
            ("OPENAI_API_KEY",),
            "TIERANK_OPENAI_BASE_URL",
            "openai",
            0.5,
            f"{_BATCHES}.openai_batches:OpenAIBatches",
        ),
        Provider(
            "anthropic",
            ("ANTHROPIC_API_KEY",),
            "TIERANK_ANTHROPIC_BASE_URL",
            "anthropic",
            0.5,
            f"{_BATCHES}.anthropic_batches:AnthropicBatches",
        ),
        Provider(
            "gemini",
            ("GEMINI_API_KEY", "GOOGLE_API_KEY"),
            "TIERANK_GEMINI_BASE_URL",
            "gcp.gemini",
            0.5,
            f"{_BATCHES}.gemini_batches:GeminiBatches",
        ),
        # It speaks OpenAI's API; a span's server.address tells which server it really is.
        Provider(
            "openai-compatible",
            ("TIERANK_OPENAI_COMPATIBLE_API_KEY",),
            "TIERANK_OPENAI_COMPATIBLE_BASE_URL",
            "openai",
        ),
    )
}
PROVIDERS = tuple(PROVIDERS_BY_NAME)
BATCH_PROVIDERS = tuple(p.name for p in PROVIDERS_BY_NAME.values() if p.batch_transport)


def no_batch_api(provider: str) -> str:
    """Why `provider` (as the caller shows it) cannot run in batch mode, and which can."""
    return f"{provider} has no batch API (batch mode: {', '.join(BATCH_PROVIDERS)})"
