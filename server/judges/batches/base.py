"""The one interface a provider batch API implements, and what every vendor shares: payload
splitting within declared limits, custom-id checks, and polling with backoff and jitter."""

from __future__ import annotations

import abc
import enum
import json
import random
import re
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Generic, TypeVar

from tierank.server.judges.base import BatchRequest, JudgeReply
from tierank.server.judges.bounded_http import MAX_RESPONSE_BYTES
from tierank.server.judges.llm import Completion, LLMJudge
from tierank.server.judges.prices import batch_price
from tierank.server.judges.retry import RETRYABLE, CallError
from tierank.server.judges.settings import BatchSettings

J = TypeVar("J", bound=LLMJudge)
R = TypeVar("R")
# A payload's own JSON around its entries (brackets, keys, model name): counted once, generously.
PAYLOAD_OVERHEAD_BYTES = 1024
# Our own id of a batch (the journal's), carried by the vendor's batch where the vendor takes a
# label: it fits OpenAI's metadata values (512 characters) and Gemini's display names.
LABEL_PATTERN = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
# How far the vendor's clock may be behind ours when it stamps a batch's creation: the journal
# writes its own time before submitting, the vendor stamps the batch when it gets it.
CLOCK_SKEW_S = 120.0
# What a page of a vendor's batch list may take: batch objects (ids, times, counts, OpenAI's
# metadata and a failed batch's line errors) of a few KiB each, never answers; far above any
# page of the sizes the transports ask for, where one answer's 1 MiB cap would be too tight.
LIST_PAGE_MAX_BYTES = 16 * 1024 * 1024


@dataclass(frozen=True)
class BatchLimits:
    """The most one provider batch may carry, and where the vendor says so."""

    # None: the vendor states no count limit (its byte limit bounds the count).
    max_requests: int | None
    max_bytes: int
    source: str


@dataclass(frozen=True)
class BatchCall:
    """One judge call in a batch, under the caller's id (a job's call id, or a mapping of it
    where the vendor's custom-id rule refuses it)."""

    custom_id: str
    request: BatchRequest


class BatchPhase(enum.StrEnum):
    # Still processing, cancelling, or (OpenAI) its results files not written yet.
    OPEN = "open"
    # Its results can be fetched: every call has an answer or a failure.
    ENDED = "ended"
    # The whole batch failed (refused input, a vendor failure): no call was answered.
    FAILED = "failed"


@dataclass(frozen=True)
class BatchStatus:
    batch_id: str
    phase: BatchPhase
    # As the vendor says it (OpenAI `status`, Anthropic `processing_status`, Gemini `state`).
    vendor_status: str
    # The vendor's own request counts under its own names; empty where its SDK gives none.
    counts: Mapping[str, int]
    # Why the whole batch failed, where it did.
    message: str = ""


class BatchFailureKind(enum.StrEnum):
    # The vendor answered this request with an error (its type in `error_type`).
    ERRORED = "errored"
    # The batch's window ended before the request was processed.
    EXPIRED = "expired"
    # The batch was cancelled before the request was processed.
    CANCELLED = "cancelled"


@dataclass(frozen=True)
class BatchCallFailure:
    kind: BatchFailureKind
    # The vendor's error type or code ("invalid_request_error", "batch_expired", "429", ...);
    # "no_result" when the vendor said nothing of the request.
    error_type: str
    message: str

    def __str__(self) -> str:
        return f"{self.kind} ({self.error_type}): {self.message}"


BatchOutcome = JudgeReply | BatchCallFailure
NO_RESULT = "no_result"


class BatchTransport(abc.ABC, Generic[J]):
    """One vendor's batch API for one judge (its client, model and parameters). SDK failures
    of submit, poll, results and cancel raise CallError, classified as call by call."""

    provider: ClassVar[str]
    # Declared once per vendor, with its source.
    default_limits: ClassVar[BatchLimits]
    # What the vendor accepts as a custom id, and the rule in words for the error.
    custom_id_pattern: ClassVar[re.Pattern[str]] = re.compile(r"^.+$", re.DOTALL)
    custom_id_rule: ClassVar[str] = "a non-empty string"

    def __init__(self, judge: J, limits: BatchLimits | None = None) -> None:
        self.judge = judge
        self.limits = limits or self.default_limits
        self.price = batch_price(self.provider, judge.price)

    # -- what a vendor implements ---------------------------------------------------------------

    @abc.abstractmethod
    def entry(self, call: BatchCall) -> dict[str, Any]:
        """The call as one entry of the vendor's payload (JSON-serialisable)."""

    @abc.abstractmethod
    async def submit(self, calls: Sequence[BatchCall], label: str) -> str:
        """Submits one payload (from `payloads`) under `label`, our own id of the batch
        (LABEL_PATTERN), which the vendor's batch carries where the vendor takes one; returns
        the vendor's batch id."""

    @abc.abstractmethod
    async def find_submitted(
        self, label: str, created_after: float, calls: int, known: Collection[str]
    ) -> str | None:
        """The vendor's id of the batch `submit` created under `label`, or None when the vendor
        has none: for a batch journaled (at Unix time `created_after`, with `calls` calls) but
        whose vendor id was never written, because the process ended while it was submitted.
        `known` are the vendor ids the journal holds already, none of which is the answer.
        Looked up among the vendor's own batches (its list call); SDK failures raise CallError
        as the other calls do, and a failed lookup says nothing: the caller must not submit."""

    @abc.abstractmethod
    async def poll(self, batch_id: str) -> BatchStatus: ...

    @abc.abstractmethod
    async def _outcomes(self, batch_id: str, calls: Mapping[str, BatchCall]) -> VendorOutcomes:
        """Each answered or failed call the vendor reports, by custom id, and the failure of
        the calls it says nothing of."""

    @abc.abstractmethod
    async def cancel(self, batch_id: str) -> None:
        """Asks the vendor to cancel; the batch ends later (answered calls keep their answer)."""

    # -- shared ---------------------------------------------------------------------------------

    @staticmethod
    def results_cap(calls: int) -> int:
        """The most bytes the results of `calls` calls may take: each answer may take what one
        call's answer may (bounded_http.MAX_RESPONSE_BYTES), and the per-call cap would refuse
        any batch of more than a few hundred answers."""
        return PAYLOAD_OVERHEAD_BYTES + calls * MAX_RESPONSE_BYTES

    def entry_bytes(self, call: BatchCall) -> int:
        return len(json.dumps(self.entry(call), separators=(",", ":")).encode()) + 1

    def payloads(self, calls: Sequence[BatchCall]) -> list[list[BatchCall]]:
        """`calls` in submission order, cut into payloads within the limits. A single call
        larger than the byte limit is refused (ValueError): no batch can carry it."""
        self._check_ids(calls)
        payloads: list[list[BatchCall]] = []
        current: list[BatchCall] = []
        size = PAYLOAD_OVERHEAD_BYTES
        for call in calls:
            grows = self.entry_bytes(call)
            if PAYLOAD_OVERHEAD_BYTES + grows > self.limits.max_bytes:
                raise ValueError(
                    f"call {call.custom_id!r} takes {grows} bytes, more than a "
                    f"{self.provider} batch may carry ({self.limits.max_bytes})"
                )
            if current and (
                len(current) == self.limits.max_requests or size + grows > self.limits.max_bytes
            ):
                payloads.append(current)
                current, size = [], PAYLOAD_OVERHEAD_BYTES
            current.append(call)
            size += grows
        if current:
            payloads.append(current)
        return payloads

    async def results(self, batch_id: str, calls: Sequence[BatchCall]) -> dict[str, BatchOutcome]:
        """Every call of an ended batch: its reply (read as call by call, charged at the batch
        price) or its failure. `calls` are those submitted in it (the caller journals them)."""
        by_id = {call.custom_id: call for call in calls}
        found = await self._outcomes(batch_id, by_id)
        outcomes: dict[str, BatchOutcome] = {}
        for custom_id, call in by_id.items():
            outcome = found.by_id.get(custom_id, found.missing)
            if isinstance(outcome, Completion):
                outcomes[custom_id] = self.judge.reply_to(call.request, outcome, self.price)
            else:
                outcomes[custom_id] = outcome
        return outcomes

    @staticmethod
    def _check_label(label: str) -> None:
        if not LABEL_PATTERN.match(label):
            raise ValueError(f"batch label {label!r}: 1 to 64 letters, digits, '_' or '-'")

    def _check_ids(self, calls: Sequence[BatchCall]) -> None:
        seen: set[str] = set()
        for call in calls:
            if not self.custom_id_pattern.match(call.custom_id):
                raise ValueError(
                    f"custom id {call.custom_id!r}: {self.provider} accepts {self.custom_id_rule}"
                )
            if call.custom_id in seen:
                raise ValueError(f"custom id {call.custom_id!r}: must be unique in a batch")
            seen.add(call.custom_id)

    def _answer(self, parse: Callable[[R], Completion], body: R) -> Completion | BatchCallFailure:
        """A result body read with the call-by-call parser; one it refuses is an error."""
        try:
            return parse(body)
        except CallError as error:
            return BatchCallFailure(BatchFailureKind.ERRORED, str(error.kind), error.message)


@dataclass
class VendorOutcomes:
    """What an ended batch says of its calls, as a vendor's transport reads it."""

    by_id: dict[str, Completion | BatchCallFailure]
    # What a call the vendor says nothing of has become (decided by the batch's final status).
    missing: BatchCallFailure


def missing_failure(vendor_status: str) -> BatchCallFailure:
    """The failure of a call an ended batch says nothing of, from the batch's final status."""
    status = vendor_status.lower()
    if "expire" in status:
        return BatchCallFailure(
            BatchFailureKind.EXPIRED, NO_RESULT, f"the batch ended {vendor_status} before it"
        )
    if "cancel" in status:
        return BatchCallFailure(
            BatchFailureKind.CANCELLED, NO_RESULT, f"the batch was {vendor_status} before it"
        )
    return BatchCallFailure(
        BatchFailureKind.ERRORED, NO_RESULT, f"the batch ended {vendor_status} without it"
    )


# -- polling ------------------------------------------------------------------------------------


_MAX_GROWTH_STEPS = 64


def poll_delay(attempt: int, policy: BatchSettings, rng: random.Random) -> float:
    """The wait before poll number `attempt` (0-based) after the first."""
    # The exponent is capped: a batch polled for a day must not overflow the float.
    growth = policy.poll_multiplier ** min(attempt, _MAX_GROWTH_STEPS)
    nominal = min(policy.max_poll_s, policy.first_poll_s * growth)
    return nominal * (1.0 - policy.poll_jitter * rng.random())


async def poll_once(
    transport: BatchTransport[Any],
    batch_id: str,
    attempt: int,
    policy: BatchSettings,
    rng: random.Random,
) -> tuple[BatchStatus | None, float]:
    """Poll number `attempt` (0-based) of a batch: its status, or None when the poll failed in
    a way worth retrying (429, 5xx, timeout, connection; any other failure is raised), and how
    long to wait before the next poll: `poll_delay`, and at least a refusal's Retry-After."""
    wait = poll_delay(attempt, policy, rng)
    try:
        return await transport.poll(batch_id), wait
    except CallError as error:
        if error.kind not in RETRYABLE:
            raise
        return None, max(wait, error.retry_after_s or 0.0)
