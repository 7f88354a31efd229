"""Provider batch APIs (OpenAI Batch, Anthropic Message Batches, Gemini batch mode): about half
the price of the same calls, answered within hours instead of seconds.

One narrow interface, `BatchTransport` (base.py), that each vendor implements on its official
SDK (openai_batches.py, anthropic_batches.py, gemini_batches.py), built for one judge: its
client, model and parameters. A transport splits calls into payloads within the vendor's
declared limits, submits one payload (-> a batch id), polls it (-> its phase and the vendor's
own counts), fetches its results (-> per custom id a JudgeReply read with the same request
builder, reply parser and usage reading as the call-by-call path, charged at the batch price;
or a BatchCallFailure: errored with the vendor's error type, expired, cancelled), and cancels.
Nothing is invented: a call the vendor says nothing about fails as errored ("no_result"), or as
expired/cancelled when the whole batch was.

Batch mode (server/jobs/provider_batches.py) builds on it: it journals each payload under our
own batch id before `submit` (which gives the vendor's batch that id as its label where the
vendor takes one) and the vendor's id after; `find_submitted` finds a batch whose submission
was cut off (OpenAI batches carry the label in their metadata, Gemini jobs as their display
name; Anthropic batches carry none, so their creation time and request count, and the vendor
ids already journaled, tell them apart). `poll_once` is one poll with its backoff and jitter.
"""

from __future__ import annotations

from typing import Any

from tierank.server.judges.base import JudgeConfigError
from tierank.server.judges.batches.base import BatchLimits, BatchTransport
from tierank.server.judges.llm import BATCH_PROVIDERS, LLMJudge

__all__ = ["BATCH_PROVIDERS", "transport_for"]


def transport_for(judge: LLMJudge, limits: BatchLimits | None = None) -> BatchTransport[Any]:
    """The batch transport of `judge`'s provider, on the judge's own client. The vendor's
    module (and SDK) is imported here, as the judges import theirs when first built."""
    if judge.provider == "openai":
        from tierank.server.judges.batches.openai_batches import OpenAIBatches

        return OpenAIBatches(judge, limits)  # type: ignore[arg-type]
    if judge.provider == "anthropic":
        from tierank.server.judges.batches.anthropic_batches import AnthropicBatches

        return AnthropicBatches(judge, limits)  # type: ignore[arg-type]
    if judge.provider == "gemini":
        from tierank.server.judges.batches.gemini_batches import GeminiBatches

        return GeminiBatches(judge, limits)  # type: ignore[arg-type]
    raise JudgeConfigError(
        "provider", f"{judge.provider} has no batch API (batch mode: {', '.join(BATCH_PROVIDERS)})"
    )
