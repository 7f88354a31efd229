"""Our one retry loop around a provider call (every SDK's own retries are turned off).

Retried: 429 (waiting what Retry-After asks), 5xx, per-attempt timeouts and connection errors,
with jittered exponential backoff in between. Never retried: other 4xx, and anything that could
not finish before the request's deadline. Each attempt's timeout is
min(call timeout, time left to the deadline), the call timeout being the job's
`timeout_seconds` or else the provider's; the wait for a rate-limit slot is bounded by the
deadline too, and is not part of the attempt's time.

The breaker (shared by every job) hears only of the provider's own failures: 5xx, connection
errors, and timeouts at the provider's configured timeout. A timeout the caller shortened (a
job's `timeout_seconds`, its deadline) or a wait for a slot is that call's business alone.
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


@dataclass
class InFlightTime:
    """Seconds the call's HTTP requests were in flight: the latency a judge is charged with,
    excluding waits for a rate-limit or concurrency slot and backoff between attempts; and, for
    the call's span and metrics, the requests it sent, how many of them were sent again after a
    retryable failure, and how long it waited for slots."""

    seconds: float = 0.0
    requests: int = 0
    retries: int = 0
    waited_s: float = 0.0


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
    propagates when no retry is left or allowed. `timeout_s` is this call's timeout per
    attempt, `provider_timeout_s` the provider's own: only a timeout at least that long is
    the provider's fault."""
    attempt = 0
    while True:
        attempt += 1
        if breaker.is_open:
            wait = breaker.seconds_until_closed()
            cause = f" (last: {breaker.last_failure})" if breaker.last_failure else ""
            raise CallError(
                FailureKind.UNAVAILABLE,
                f"circuit open after repeated failures{cause}; retry in {wait:.1f}s",
            )
        try:
            result = await _attempt(send, slot, timeout_s, provider_timeout_s, deadline, in_flight)
        except CallError as error:
            if error.kind in TRIPS_BREAKER and error.provider_fault:
                breaker.record_failure(f"{error.kind}: {error.message}")
            delay = _retry_delay(error, attempt, policy, deadline, rng)
            if delay is None:
                raise
            in_flight.retries += 1
            await asyncio.sleep(delay)
        else:
            breaker.record_success()
            return result


async def _attempt(
    send: Callable[[], Awaitable[T]],
    slot: Callable[[], AbstractAsyncContextManager[None]],
    timeout_s: float,
    provider_timeout_s: float,
    deadline: float | None,
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
        in_flight.requests += 1
        per_attempt = min(timeout_s, _remaining(deadline))
        sent = time.monotonic()
        try:
            async with asyncio.timeout(per_attempt):
                return await send()
        except TimeoutError:
            raise CallError(
                FailureKind.TIMEOUT,
                f"no answer within {per_attempt:.3g}s",
                provider_fault=per_attempt >= provider_timeout_s,
            ) from None
        finally:
            in_flight.seconds += time.monotonic() - sent


def _retry_delay(
    error: CallError,
    attempt: int,
    policy: RetryPolicy,
    deadline: float | None,
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
    # Waiting past the deadline only to be cut off would waste the slot and the time.
    return None if delay >= _remaining(deadline) else delay


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
