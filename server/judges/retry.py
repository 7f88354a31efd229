"""Our one retry loop around a provider call (every SDK's own retries are turned off).

Retried: 429 (waiting what Retry-After asks), 5xx, per-attempt timeouts and connection errors,
with jittered exponential backoff in between. Never retried: other 4xx, and anything that could
not finish before the request's deadline or within its time limit. Each attempt's timeout is
min(call timeout, time left to the deadline, time left of the limit), the call timeout being
the job's `timeout_seconds` or else the provider's, and the limit
max(`retry.max_elapsed_s`, call timeout), counted in flight and between attempts; the wait for
a rate-limit slot is bounded by the deadline too, and is part of neither.

The breaker (shared by every job) hears only of the provider's own failures: 5xx, connection
errors, and timeouts at the provider's configured timeout or at the end of the time limit. A
timeout the caller shortened (a job's `timeout_seconds`, its deadline) or a wait for a slot is
that call's business alone. A call that waits for a slot while the breaker opens is refused
once it has the slot, rather than sent to an endpoint just found dead.
"""

from __future__ import annotations

import asyncio
import email.utils
import math
import random
import time
from collections.abc import Awaitable, Callable, Mapping
from contextlib import AbstractAsyncContextManager, AsyncExitStack
from dataclasses import dataclass
from typing import TypeVar

from tierank.server.judges.base import FailureKind
from tierank.server.judges.breaker import CircuitBreaker
from tierank.server.judges.settings import RetryPolicy

T = TypeVar("T")

RETRYABLE = frozenset(
    {
        FailureKind.RATE_LIMITED,
        FailureKind.SERVER_ERROR,
        FailureKind.TIMEOUT,
        FailureKind.CONNECTION_ERROR,
    }
)
# A 429 means "slow down", not "down": it is retried but does not trip the breaker.
TRIPS_BREAKER = RETRYABLE - {FailureKind.RATE_LIMITED}


class CallError(Exception):
    """A provider call that failed, classified. Adapters raise it from SDK exceptions.
    `provider_fault` is False for a failure the caller's own settings caused."""

    def __init__(
        self,
        kind: FailureKind,
        message: str,
        retry_after_s: float | None = None,
        *,
        provider_fault: bool = True,
    ) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message
        self.retry_after_s = retry_after_s
        self.provider_fault = provider_fault


@dataclass(eq=False)  # one per exchange, kept in a set while it lasts
class InFlightTime:
    """Seconds the call's HTTP requests were in flight: the latency a judge is charged with,
    excluding waits for a rate-limit or concurrency slot and backoff between attempts; and, for
    the call's span and metrics, the requests it sent, how many of them were sent again after a
    retryable failure, and how long it waited for slots."""

    seconds: float = 0.0
    requests: int = 0
    retries: int = 0
    waited_s: float = 0.0
    # When the request now in flight was sent (time.monotonic()); None between requests.
    sent_at: float | None = None


def retry_after_seconds(
    headers: Mapping[str, str] | None, now: float | None = None
) -> float | None:
    """The wait a response asks for: `retry-after-ms`, else `retry-after` as seconds or as an
    HTTP date; None when absent or unreadable."""
    if not headers:
        return None
    lowered = {key.lower(): value for key, value in headers.items()}
    milliseconds = lowered.get("retry-after-ms")
    if milliseconds is not None:
        try:
            return max(float(milliseconds) / 1000, 0.0)
        except ValueError:
            pass  # unreadable: retry-after may still say
    value = lowered.get("retry-after")
    if value is None:
        return None
    try:
        return max(float(value), 0.0)
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(when.timestamp() - (time.time() if now is None else now), 0.0)


def backoff_delay(attempt: int, policy: RetryPolicy, rng: random.Random) -> float:
    """Exponential in the attempt number, with equal jitter so callers that failed together
    do not come back together."""
    ceiling = min(policy.max_delay_s, policy.base_delay_s * 2 ** (attempt - 1))
    return ceiling / 2 + rng.uniform(0, ceiling / 2)


def _remaining(deadline: float | None) -> float:
    return math.inf if deadline is None else deadline - time.monotonic()


def time_limit_s(policy: RetryPolicy, timeout_s: float) -> float:
    """How long one request and its retries may take in all, with `timeout_s` per attempt:
    `policy.max_elapsed_s`, or one whole attempt when that is longer."""
    return max(policy.max_elapsed_s, timeout_s)


@dataclass
class _TimeLimit:
    """What one request and its retries have used of their time limit: time in flight and
    between attempts, not waiting for a slot."""

    limit_s: float
    spent_s: float = 0.0
    # When its first attempt was sent (monotonic clock); None until then.
    first_sent: float | None = None

    @property
    def left_s(self) -> float:
        return self.limit_s - self.spent_s


def _refuse_if_open(breaker: CircuitBreaker) -> None:
    if breaker.is_open:
        wait = breaker.seconds_until_closed()
        cause = f" (last: {breaker.last_failure})" if breaker.last_failure else ""
        raise CallError(
            FailureKind.UNAVAILABLE,
            f"circuit open {breaker.opened_by}{cause}; retry in {wait:.1f}s",
        )


async def call_with_retries(
    send: Callable[[], Awaitable[T]],
    *,
    slot: Callable[[], AbstractAsyncContextManager[None]],
    policy: RetryPolicy,
    timeout_s: float,
    provider_timeout_s: float,
    deadline: float | None,
    breaker: CircuitBreaker,
    rng: random.Random,
    in_flight: InFlightTime,
) -> T:
    """`send` performs one HTTP attempt and raises CallError on failure; the last CallError
    propagates when no retry is left or allowed (nor time within the request's time limit,
    `time_limit_s`). `timeout_s` is this call's timeout per attempt, `provider_timeout_s` the
    provider's own: a timeout shorter than that, or cut by the deadline, is the caller's
    choice, not the provider's fault."""
    limit = _TimeLimit(time_limit_s(policy, timeout_s))
    attempt = 0
    while True:
        attempt += 1
        _refuse_if_open(breaker)
        try:
            result = await _attempt(
                send, slot, breaker, timeout_s, provider_timeout_s, deadline, limit, in_flight
            )
        except CallError as error:
            if error.kind in TRIPS_BREAKER and error.provider_fault:
                breaker.record_failure(f"{error.kind}: {error.message}")
            time_left = min(_remaining(deadline), limit.left_s)
            delay = _retry_delay(error, attempt, policy, time_left, rng)
            if delay is None:
                if error.kind is FailureKind.TIMEOUT and error.provider_fault:
                    _trip_if_never_answered(breaker, limit, error)
                raise
            in_flight.retries += 1
            await asyncio.sleep(delay)
            limit.spent_s += delay
        else:
            breaker.record_success()
            return result


def _trip_if_never_answered(breaker: CircuitBreaker, limit: _TimeLimit, error: CallError) -> None:
    """A request that timed out with its whole time limit spent opens the breaker at once if
    the model answered no request meanwhile: the calls queued behind it (all of a one-slot
    local server's) then fail at once instead of each waiting out a limit of its own."""
    if limit.first_sent is not None and limit.left_s <= _LIMIT_SPENT_SLACK_S:
        breaker.trip_if_silent(limit.first_sent, f"{error.kind}: {error.message}")


# A limit with less than this left counts as spent: the last attempt's timeout is cut to what
# was left, and an event loop may fire a timer a little early (by its clock's resolution).
_LIMIT_SPENT_SLACK_S = 0.05


async def _attempt(
    send: Callable[[], Awaitable[T]],
    slot: Callable[[], AbstractAsyncContextManager[None]],
    breaker: CircuitBreaker,
    timeout_s: float,
    provider_timeout_s: float,
    deadline: float | None,
    limit: _TimeLimit,
    in_flight: InFlightTime,
) -> T:
    remaining = _remaining(deadline)
    if remaining <= 0:
        raise CallError(
            FailureKind.TIMEOUT, "the request's deadline has passed", provider_fault=False
        )
    async with AsyncExitStack() as stack:
        waiting = time.monotonic()
        try:
            async with asyncio.timeout(None if math.isinf(remaining) else remaining):
                await stack.enter_async_context(slot())
        except TimeoutError:
            raise CallError(
                FailureKind.TIMEOUT,
                "deadline passed while waiting for a rate-limit slot",
                provider_fault=False,
            ) from None
        finally:
            in_flight.waited_s += time.monotonic() - waiting
        _refuse_if_open(breaker)  # it may have opened while this call waited for the slot
        in_flight.requests += 1
        own = min(timeout_s, limit.left_s)
        to_deadline = _remaining(deadline)
        per_attempt = min(own, to_deadline)
        sent = in_flight.sent_at = time.monotonic()
        if limit.first_sent is None:
            limit.first_sent = sent
        try:
            async with asyncio.timeout(per_attempt):
                return await send()
        except TimeoutError:
            # The provider's fault unless the caller chose a shorter wait: a job's timeout
            # below the provider's, or its deadline. The time limit is the server's own.
            chosen = timeout_s < provider_timeout_s or to_deadline <= own
            raise CallError(
                FailureKind.TIMEOUT,
                f"no answer within {per_attempt:.3g}s",
                provider_fault=not chosen,
            ) from None
        finally:
            in_flight.sent_at = None
            elapsed = time.monotonic() - sent
            in_flight.seconds += elapsed
            limit.spent_s += elapsed


def _retry_delay(
    error: CallError,
    attempt: int,
    policy: RetryPolicy,
    time_left: float,
    rng: random.Random,
) -> float | None:
    """Seconds to wait before the next attempt, or None when the error must stand."""
    if error.kind not in RETRYABLE or attempt >= policy.max_attempts:
        return None
    if error.retry_after_s is not None:
        if error.retry_after_s > policy.max_retry_after_s:
            return None
        delay = error.retry_after_s
    else:
        delay = backoff_delay(attempt, policy, rng)
    # Waiting past the deadline or the time limit only to be cut off would waste the slot and
    # the time.
    return None if delay >= time_left else delay


def classify_status(status: int, headers: Mapping[str, str] | None, message: str) -> CallError:
    """An HTTP error status as one of our failure kinds (any provider)."""
    retry_after = retry_after_seconds(headers)
    if status == 429:
        return CallError(FailureKind.RATE_LIMITED, f"HTTP 429: {message}", retry_after)
    if status == 408:
        return CallError(FailureKind.TIMEOUT, f"HTTP 408: {message}", retry_after)
    if status >= 500:
        # 503 and Anthropic's 529 "overloaded" may carry Retry-After too.
        return CallError(FailureKind.SERVER_ERROR, f"HTTP {status}: {message}", retry_after)
    return CallError(FailureKind.CLIENT_ERROR, f"HTTP {status}: {message}")
