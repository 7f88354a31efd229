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

import importlib
from typing import Any

from tierank.server.judges.base import JudgeConfigError
from tierank.server.judges.batches.base import BatchLimits, BatchTransport
from tierank.server.judges.llm import LLMJudge
from tierank.server.judges.providers import BATCH_PROVIDERS, PROVIDERS_BY_NAME, no_batch_api

__all__ = ["BATCH_PROVIDERS", "transport_for"]


def transport_for(judge: LLMJudge, limits: BatchLimits | None = None) -> BatchTransport[Any]:
    """The batch transport of `judge`'s provider, on the judge's own client. The vendor's
    module (and SDK) is imported here, as the judges import theirs when first built."""
    described = PROVIDERS_BY_NAME.get(judge.provider)
    if described is not None and described.batch_transport is not None:
        module, _, name = described.batch_transport.partition(":")
        transport: Any = getattr(importlib.import_module(module), name)
        return transport(judge, limits)
    raise JudgeConfigError("provider", no_batch_api(judge.provider))
