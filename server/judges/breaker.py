"""A circuit breaker per (provider, model): stop calling a model that keeps failing.

After `failure_threshold` consecutive failures of the provider's own (5xx, connection errors,
timeouts at the provider's configured timeout; never 429s, nor failures a caller's settings
caused: see retry.py) the breaker opens for `cooldown_s`; calls made meanwhile fail at once as
unavailable instead of queueing behind a dead endpoint. After the cool-down the breaker is
half-open: calls go through, the first success closes it and the first failure opens it again.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from tierank.server.judges.settings import BreakerPolicy


class CircuitBreaker:
    def __init__(self, policy: BreakerPolicy, clock: Callable[[], float] = time.monotonic) -> None:
        self._policy = policy
        self._clock = clock
        self._consecutive_failures = 0
        self._open_until: float | None = None
        # Why the provider was last seen failing, so a call refused by the open breaker can
        # say more than "circuit open" (calls in flight together may all be refused this way).
        self.last_failure = ""

    @property
    def is_open(self) -> bool:
        return self._open_until is not None and self._clock() < self._open_until

    @property
    def state(self) -> str:
        """ "closed", "open", or "half_open" (cooled down; the next outcome decides)."""
        if self._open_until is None:
            return "closed"
        return "open" if self.is_open else "half_open"

    def seconds_until_closed(self) -> float:
        if self._open_until is None:
            return 0.0
        return max(self._open_until - self._clock(), 0.0)

    def record_success(self) -> None:
        self._consecutive_failures = 0
        self._open_until = None

    def record_failure(self, reason: str = "") -> None:
        self._consecutive_failures += 1
        self.last_failure = reason or self.last_failure
        half_open = self._open_until is not None
        if half_open or self._consecutive_failures >= self._policy.failure_threshold:
            self._open_until = self._clock() + self._policy.cooldown_s
