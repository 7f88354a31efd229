"""Gemini batch mode (Gemini Developer API) through google-genai's `batches`: inlined
requests, each carrying its custom id as metadata `key`, answered by inlined responses that
echo it; job states JOB_STATE_PENDING / RUNNING / SUCCEEDED / FAILED / CANCELLED / EXPIRED; our
label as the job's display name."""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import Any

from google.genai import types

from tierank.server.judges.base import FailureKind
from tierank.server.judges.batches.base import (
    CLOCK_SKEW_S,
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
from tierank.server.judges.gemini_judge import (
    GeminiJudge,
    content_completion,
    contents,
)
from tierank.server.judges.llm import Completion
from tierank.server.judges.retry import CallError
from tierank.server.judges.sdk_errors import genai_errors

LIMITS = BatchLimits(
    max_requests=None,
    max_bytes=20 * 1000 * 1000,
    source=(
        "ai.google.dev/gemini-api/docs/batch-api (inline requests): total request size under "
        "20 MB; no count limit stated"
    ),
)
# The Gemini Developer API serves batches under v1beta (ai.google.dev/api/batch-mode), while
# google-genai calls v1 by default.
API_VERSION = "v1beta"
_HTTP = types.HttpOptions(api_version=API_VERSION)
# What a poll may read: an ended job holds all its inlined responses, and a poll does not know
# how many calls it carries (the 20 MB of requests it may hold answer in less than this).
JOB_MAX_BYTES = 64 * 1024 * 1024
# Jobs per list page: few, since a listed job carries its inlined responses as a fetched one
# does (google-genai reads `metadata.output` of every listed operation), so a page may take
# JOB_MAX_BYTES per job.
LIST_PAGE_SIZE = 4
# The metadata key that carries a request's custom id (the docs' own example uses "key").
KEY = "key"
_ENDED = frozenset(
    {
        types.JobState.JOB_STATE_SUCCEEDED,
        types.JobState.JOB_STATE_PARTIALLY_SUCCEEDED,
        types.JobState.JOB_STATE_CANCELLED,
        types.JobState.JOB_STATE_EXPIRED,
    }
)


class GeminiBatches(BatchTransport[GeminiJudge]):
    provider = "gemini"
    default_limits = LIMITS

    def entry(self, call: BatchCall) -> dict[str, Any]:
        ranking = self.judge.ranking_call(call.request)
        config = self.judge.generation_config(
            ranking.max_output_tokens, call.request.seed, ranking.schema
        )
        return {
            "contents": [
                content.model_dump(mode="json", exclude_none=True)
                for content in contents([ranking.message()])
            ],
            "config": config.model_dump(mode="json", exclude_none=True),
            "metadata": {KEY: call.custom_id},
        }

    async def submit(self, calls: Sequence[BatchCall], label: str) -> str:
        self._check_label(label)
        self._check_ids(calls)
        with genai_errors("creating the batch"):
            job = await self.judge.client.genai.aio.batches.create(
                model=self.judge.config.model,
                src=[types.InlinedRequest.model_validate(self.entry(call)) for call in calls],
                config=types.CreateBatchJobConfig(display_name=label, http_options=_HTTP),
            )
        if not job.name:
            raise CallError(FailureKind.SERVER_ERROR, "the created batch has no name")
        return job.name

    async def find_submitted(
        self, label: str, created_after: float, calls: int, known: Collection[str]
    ) -> str | None:
        """The job whose display name is `label` (BatchJob.display_name, the batch's
        `displayName`), created (create_time) no earlier than `created_after` less the clock
        skew. batches.list (GET v1beta/batches: pageSize, pageToken; ListOperationsResponse:
        `operations`, `nextPageToken`, which google-genai's pager follows) states no order, so
        every page may be read before a label is known to be absent. The label alone decides;
        `calls` and `known` are not needed."""
        oldest = created_after - CLOCK_SKEW_S
        config = types.ListBatchJobsConfig(page_size=LIST_PAGE_SIZE, http_options=_HTTP)
        with genai_errors("listing the batches"), response_cap(LIST_PAGE_SIZE * JOB_MAX_BYTES):
            async for job in await self.judge.client.genai.aio.batches.list(config=config):
                created = job.create_time.timestamp() if job.create_time else oldest
                if job.display_name == label and created >= oldest and job.name:
                    return job.name
        return None

    async def _job(self, batch_id: str, what: str, cap: int = JOB_MAX_BYTES) -> types.BatchJob:
        # An ended job carries every inlined response, whoever asks for it (polls too).
        with genai_errors(what), response_cap(cap):
            return await self.judge.client.genai.aio.batches.get(
                name=batch_id, config=types.GetBatchJobConfig(http_options=_HTTP)
            )

    async def poll(self, batch_id: str) -> BatchStatus:
        job = await self._job(batch_id, "polling the batch")
        state = job.state or types.JobState.JOB_STATE_UNSPECIFIED
        # google-genai reads no batchStats from the Gemini Developer API: no counts to show.
        if state is types.JobState.JOB_STATE_FAILED:
            message = (job.error.message if job.error else None) or "failed"
            return BatchStatus(batch_id, BatchPhase.FAILED, state.value, {}, message)
        phase = BatchPhase.ENDED if state in _ENDED else BatchPhase.OPEN
        return BatchStatus(batch_id, phase, state.value, {})

    async def _outcomes(self, batch_id: str, calls: Mapping[str, BatchCall]) -> VendorOutcomes:
        cap = max(JOB_MAX_BYTES, self.results_cap(len(calls)))
        job = await self._job(batch_id, "reading the batch results", cap)
        found: dict[str, Completion | BatchCallFailure] = {}
        for inlined in (job.dest.inlined_responses if job.dest else None) or ():
            custom_id = (inlined.metadata or {}).get(KEY)
            if custom_id is None:
                # Without its key a response cannot be matched to a call: it is not guessed
                # from its position, and its call fails as one with no result.
                continue
            if inlined.error is not None:
                error = inlined.error
                found[custom_id] = BatchCallFailure(
                    BatchFailureKind.ERRORED, str(error.code), error.message or ""
                )
            elif inlined.response is not None:
                found[custom_id] = self._answer(content_completion, inlined.response)
        state = job.state or types.JobState.JOB_STATE_UNSPECIFIED
        return VendorOutcomes(found, missing_failure(state.value))

    async def cancel(self, batch_id: str) -> None:
        with genai_errors("cancelling the batch"):
            await self.judge.client.genai.aio.batches.cancel(
                name=batch_id, config=types.CancelBatchJobConfig(http_options=_HTTP)
            )
