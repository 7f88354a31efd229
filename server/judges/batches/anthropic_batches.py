"""Anthropic's Message Batches: the calls as `requests=[{custom_id, params}]`, statuses
in_progress / canceling / ended, and the results streamed as JSONL from the batch's
results_url, each succeeded, errored, canceled or expired, in any order. A batch carries no
label of ours (the create request takes `requests` only)."""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping, Sequence
from typing import Any

import anthropic

from tierank.server.judges.anthropic_judge import AnthropicJudge, message_completion
from tierank.server.judges.batches.base import (
    CLOCK_SKEW_S,
    LIST_PAGE_MAX_BYTES,
    BatchCall,
    BatchCallFailure,
    BatchFailureKind,
    BatchLimits,
    BatchPhase,
    BatchStatus,
    BatchTransport,
    VendorOutcomes,
    missing_failure,
)
from tierank.server.judges.bounded_http import response_cap
from tierank.server.judges.llm import Completion
from tierank.server.judges.sdk_errors import stainless_errors

LIMITS = BatchLimits(
    max_requests=100_000,
    max_bytes=256 * 1024 * 1024,
    source=(
        "docs.anthropic.com build-with-claude/batch-processing (batch limitations): "
        "100,000 requests or 256 MB, whichever comes first; API reference: maxItems 100000"
    ),
)

# How long after its journal entry a batch may have been created: the create request carries
# the whole payload (up to 256 MB) and may take as long as the SDK waits for it (10 minutes by
# default), plus the clock skew.
SUBMIT_WINDOW_S = 600.0 + CLOCK_SKEW_S
# Batches per list page (messages.batches.list: `limit` from 1 to 1000, default 20).
LIST_PAGE_SIZE = 100


class AnthropicBatches(BatchTransport[AnthropicJudge]):
    provider = "anthropic"
    default_limits = LIMITS
    # API reference, Create a Message Batch: custom_id pattern.
    custom_id_pattern = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
    custom_id_rule = "1 to 64 letters, digits, '_' or '-'"

    @property
    def _client(self) -> anthropic.AsyncAnthropic:
        return self.judge.client

    def entry(self, call: BatchCall) -> dict[str, Any]:
        ranking = self.judge.ranking_call(call.request)
        params = self.judge.request_params([ranking.message()], ranking.max_output_tokens)
        return {"custom_id": call.custom_id, "params": params}

    async def submit(self, calls: Sequence[BatchCall], label: str) -> str:
        # Checked all the same, so that every vendor refuses the same labels.
        self._check_label(label)
        self._check_ids(calls)
        with stainless_errors(anthropic, "creating the batch"):
            batch = await self._client.messages.batches.create(
                requests=[self.entry(call) for call in calls]  # type: ignore[misc]
            )
        return batch.id

    async def find_submitted(
        self, label: str, created_after: float, calls: int, known: Collection[str]
    ) -> str | None:
        """The oldest batch created from `created_after` less the clock skew to SUBMIT_WINDOW_S
        after it, that holds `calls` requests (the sum of its request_counts, whose parts move
        from `processing` to the others as it ends) and whose id is not in `known`.

        This is the best the API allows: a MessageBatch has no metadata or name to carry
        `label` (API reference, Create a Message Batch: `requests` only; MessageBatch: id,
        created_at, request_counts, processing_status and times), and its requests' custom
        ids are readable only from the results of an ended batch. So two unrecorded batches of
        the same size, journaled within the window of each other, cannot be told apart: each
        caller's `known` holds the ids the others recorded first, and a batch taken for the
        other shows it when its results are read (none of the caller's custom ids is there:
        each call fails as one with no result), never by paying twice.
        messages.batches.list returns the most recently created first (its reference says so)
        and pages with `after_id` = the page's `last_id`, so the walk stops at the first
        batch older than the window."""
        oldest, newest = created_after - CLOCK_SKEW_S, created_after + SUBMIT_WINDOW_S
        found: str | None = None
        with (
            stainless_errors(anthropic, "listing the batches"),
            response_cap(LIST_PAGE_MAX_BYTES),
        ):
            async for batch in self._client.messages.batches.list(limit=LIST_PAGE_SIZE):
                created = batch.created_at.timestamp()
                if created < oldest:
                    break
                size = sum(batch.request_counts.model_dump().values())
                if created <= newest and size == calls and batch.id not in known:
                    found = batch.id  # newest first: the last one found is the oldest
        return found

    async def poll(self, batch_id: str) -> BatchStatus:
        with stainless_errors(anthropic, "polling the batch"):
            batch = await self._client.messages.batches.retrieve(batch_id)
        status = batch.processing_status
        # results_url is given once processing has ended; until then nothing can be read.
        ended = status == "ended" and batch.results_url is not None
        phase = BatchPhase.ENDED if ended else BatchPhase.OPEN
        return BatchStatus(batch_id, phase, status, batch.request_counts.model_dump())

    async def _outcomes(self, batch_id: str, calls: Mapping[str, BatchCall]) -> VendorOutcomes:
        found: dict[str, Completion | BatchCallFailure] = {}
        with (
            stainless_errors(anthropic, "reading the batch results"),
            response_cap(self.results_cap(len(calls))),
        ):
            async for item in await self._client.messages.batches.results(batch_id):
                found[item.custom_id] = self._outcome(item.result)
        return VendorOutcomes(found, missing_failure("ended"))

    def _outcome(self, result: Any) -> Completion | BatchCallFailure:
        if result.type == "succeeded":
            return self._answer(message_completion, result.message)
        if result.type == "errored":
            error = result.error.error
            return BatchCallFailure(BatchFailureKind.ERRORED, error.type, error.message)
        if result.type == "canceled":
            return BatchCallFailure(
                BatchFailureKind.CANCELLED, "canceled", "the batch was canceled"
            )
        return BatchCallFailure(BatchFailureKind.EXPIRED, "expired", "the batch expired first")

    async def cancel(self, batch_id: str) -> None:
        with stainless_errors(anthropic, "cancelling the batch"):
            await self._client.messages.batches.cancel(batch_id)
