"""A circuit breaker per (provider, model): stop calling a model that keeps failing.

After `failure_threshold` consecutive failures of the provider's own (5xx, connection errors,
timeouts at the provider's configured timeout; never 429s, nor failures a caller's settings
caused: see retry.py) the breaker opens for `cooldown_s`; calls made meanwhile fail at once as
unavailable instead of queueing behind a dead endpoint. It also opens at once when a request
went unanswered for its call's whole time limit while the model answered nobody else either
(`trip_if_silent`): an endpoint that takes requests and never answers. Counting alone would
take `failure_threshold` such waits, one after another where requests go one at a time (a
local server), before refusing the calls queued behind it. After the cool-down the breaker is
half-open: calls go through, the first success closes it and the first failure opens it again.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable

from tierank.server.judges.settings import BreakerPolicy


class CircuitBreaker:
    def __init__(self, policy: BreakerPolicy, clock: Callable[[], float] = time.monotonic) -> None:
        self._policy = policy
        self._clock = clock
        self._consecutive_failures = 0
        self._open_until: float | None = None
        # When a request to the model last succeeded (never: -inf).
        self._last_success = -math.inf
        # Why it opened, for the refusals' message.
        self.opened_by = ""
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
        self._last_success = self._clock()

    def record_failure(self, reason: str = "") -> None:
        self._consecutive_failures += 1
        self.last_failure = reason or self.last_failure
        half_open = self._open_until is not None
        if half_open or self._consecutive_failures >= self._policy.failure_threshold:
            self._open("after repeated failures")

    def trip_if_silent(self, since: float, reason: str) -> None:
        """A request sent at `since` (on this breaker's clock) went unanswered for its call's
        whole time limit: open now unless some request to the model succeeded meanwhile (then
        only this request is stuck, and counting goes on as for any failure)."""
        if self._last_success < since:
            self.last_failure = reason
            self._open("after a request went unanswered for its whole time limit")

    def _open(self, why: str) -> None:
        self._open_until = self._clock() + self._policy.cooldown_s
        self.opened_by = why
