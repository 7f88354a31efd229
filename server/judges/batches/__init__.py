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

The orchestration built on it (not here yet) is meant to run like this, per study wave:

1. the calls every live tournament wants next are grouped per judge; `transport.payloads`
   splits each group; the custom ids are the job's call ids (`custom_id_rule` says what each
   vendor accepts, so the caller maps ids it cannot use);
2. before `submit`, the payload (its custom ids) is journaled as "submitting" under our own
   batch id, which `submit` gives the vendor's batch as its label; after, the vendor's batch id
   is journaled with it. A restart that finds a "submitting" entry without a vendor id cannot
   know whether the vendor got it: `find_submitted` looks among the vendor's batches first, so
   nothing is paid twice (OpenAI batches carry the label in their metadata and Gemini jobs as
   their display name; Anthropic batches carry none, so their creation time and request count,
   and the vendor ids already journaled, tell them apart). Only when it finds none is the
   payload submitted again; when the lookup itself fails, nothing is submitted;
3. one replica (the lease holder of the study) polls each open batch with `poll_until_ended`
   (backoff with jitter), recording `BatchStatus` for the study's progress view;
4. once ended, `results` gives each call's reply (recorded and paid at the batch price, from
   the usage the vendor reported) or failure (expired and cancelled calls, and errored ones
   whose error type is retryable, go into the next wave or call by call; an unparseable answer
   may get its corrective follow-up call by call);
5. cancelling a study calls `cancel` on its open batches, then still fetches their results:
   what was answered before the cancel is billed and kept.
"""

from __future__ import annotations

from typing import Any

from tierank.server.judges.base import JudgeConfigError
from tierank.server.judges.batches.base import BatchLimits, BatchTransport
from tierank.server.judges.llm import LLMJudge

# Providers with a batch API (a self-hosted OpenAI-compatible server has none).
BATCH_PROVIDERS = ("openai", "anthropic", "gemini")


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
