"""OpenAI's Batch API: the calls as a JSONL file uploaded with purpose "batch", one batch on
`/v1/chat/completions` within a 24 h window, carrying our label in its metadata, answers in an
output file and failures in an error file (JSONL, one line per custom id, in any order)."""

from __future__ import annotations

import json
from collections.abc import Collection, Mapping, Sequence
from typing import Any, Final

import openai
from openai.types.chat import ChatCompletion

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
from tierank.server.judges.openai_judges import OpenAIJudge, chat_completion
from tierank.server.judges.sdk_errors import stainless_errors

ENDPOINT: Final = "/v1/chat/completions"
COMPLETION_WINDOW: Final = "24h"
LIMITS = BatchLimits(
    max_requests=50_000,
    max_bytes=200 * 1024 * 1024,
    source="openai SDK batch_create_params.py (input_file_id): up to 50,000 requests, 200 MB",
)
# The metadata key that carries our label (batch_create_params.py, metadata: up to 16 pairs,
# keys up to 64 characters, values up to 512).
LABEL_KEY: Final = "tierank_batch"
# The most batches a list page may hold (batches.list: `limit` ranges from 1 to 100).
LIST_PAGE_SIZE: Final = 100
_OPEN = frozenset({"validating", "in_progress", "finalizing", "cancelling"})
# Error codes of requests the batch never ran (OpenAI's OpenAPI spec, BatchRequestOutputError;
# its third code, request_timeout, is an error of a request that ran).
_NOT_RUN = {
    "batch_expired": BatchFailureKind.EXPIRED,
    "batch_cancelled": BatchFailureKind.CANCELLED,
}


class OpenAIBatches(BatchTransport[OpenAIJudge]):
    provider = "openai"
    default_limits = LIMITS

    @property
    def _client(self) -> openai.AsyncOpenAI:
        return self.judge.client

    def entry(self, call: BatchCall) -> dict[str, Any]:
        ranking = self.judge.ranking_call(call.request)
        body = self.judge.request_body(
            [ranking.message()],
            ranking.max_output_tokens,
            call.request.seed,
            ranking.schema,
        )
        return {"custom_id": call.custom_id, "method": "POST", "url": ENDPOINT, "body": body}

    async def submit(self, calls: Sequence[BatchCall], label: str) -> str:
        self._check_label(label)
        self._check_ids(calls)
        lines = b"".join(
            json.dumps(self.entry(call), separators=(",", ":")).encode() + b"\n" for call in calls
        )
        with stainless_errors(openai, "uploading the batch file"):
            uploaded = await self._client.files.create(
                file=("tierank-batch.jsonl", lines, "application/jsonl"), purpose="batch"
            )
        with stainless_errors(openai, "creating the batch"):
            batch = await self._client.batches.create(
                input_file_id=uploaded.id,
                endpoint=ENDPOINT,
                completion_window=COMPLETION_WINDOW,
                metadata={LABEL_KEY: label},
            )
        return batch.id

    async def find_submitted(
        self, label: str, created_after: float, calls: int, known: Collection[str]
    ) -> str | None:
        """The batch whose metadata carries `label`. batches.list (the SDK's pager, cursor
        `after` = the last id seen, `limit` up to 100) serves the newest batches first: its
        reference states no order, but the cursor walks from newest to oldest as listings show.
        So the walk stops at the first batch created (Batch.created_at, Unix seconds) before
        `created_after` less the clock skew: no older batch can be the one journaled then. The
        label alone decides; `calls` and `known` are not needed."""
        oldest = created_after - CLOCK_SKEW_S
        with (
            stainless_errors(openai, "listing the batches"),
            response_cap(LIST_PAGE_MAX_BYTES),
        ):
            async for batch in self._client.batches.list(limit=LIST_PAGE_SIZE):
                if batch.created_at < oldest:
                    return None
                if (batch.metadata or {}).get(LABEL_KEY) == label:
                    return batch.id
        return None

    async def poll(self, batch_id: str) -> BatchStatus:
        with stainless_errors(openai, "polling the batch"):
            batch = await self._client.batches.retrieve(batch_id)
        counts = batch.request_counts
        vendor_counts = counts.model_dump() if counts else {}
        if batch.status == "failed":
            errors = batch.errors.data if batch.errors and batch.errors.data else []
            message = "; ".join(f"{e.code}: {e.message}" for e in errors) or "failed"
            return BatchStatus(batch_id, BatchPhase.FAILED, batch.status, vendor_counts, message)
        # A batch says `completed` (or expired, cancelled) shortly before its output and error
        # files are written: it is open until every file its counts call for is there.
        files_ready = (batch.output_file_id or not counts or counts.completed == 0) and (
            batch.error_file_id or not counts or counts.failed == 0
        )
        open_ = batch.status in _OPEN or not files_ready
        phase = BatchPhase.OPEN if open_ else BatchPhase.ENDED
        return BatchStatus(batch_id, phase, batch.status, vendor_counts)

    async def _outcomes(self, batch_id: str, calls: Mapping[str, BatchCall]) -> VendorOutcomes:
        with stainless_errors(openai, "reading the batch"):
            batch = await self._client.batches.retrieve(batch_id)
        found: dict[str, Completion | BatchCallFailure] = {}
        for file_id in (batch.output_file_id, batch.error_file_id):
            if not file_id:
                continue
            with (
                stainless_errors(openai, "downloading the batch results"),
                response_cap(self.results_cap(len(calls))),
            ):
                content = await self._client.files.content(file_id)
            for line in content.text.splitlines():
                if line.strip():
                    result = json.loads(line)
                    found[result["custom_id"]] = self._line_outcome(result)
        return VendorOutcomes(found, missing_failure(batch.status))

    def _line_outcome(self, result: Mapping[str, Any]) -> Completion | BatchCallFailure:
        error = result.get("error")
        if error:
            code = str(error.get("code") or "error")
            kind = _NOT_RUN.get(code, BatchFailureKind.ERRORED)
            return BatchCallFailure(kind, code, str(error.get("message") or ""))
        response = result.get("response") or {}
        body = response.get("body") or {}
        if response.get("status_code") != 200:
            detail = body.get("error") or {}
            error_type = str(detail.get("type") or response.get("status_code"))
            return BatchCallFailure(
                BatchFailureKind.ERRORED, error_type, str(detail.get("message") or "")
            )
        return self._answer(chat_completion, ChatCompletion.model_validate(body))

    async def cancel(self, batch_id: str) -> None:
        with stainless_errors(openai, "cancelling the batch"):
            await self._client.batches.cancel(batch_id)
