"""Resumable event streams: what both clients share to reconnect a watch without gaps or dupes.

The server numbers each job's events 1, 2, 3, ... and WatchJob replays everything after a given
number. A watcher therefore only has to remember the last sequence it delivered: after a broken
connection it asks again from there, and drops anything at or below it (a replay can overlap
with what the broken stream already delivered).
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass

import grpc

from tierank.client._errors import TierankError, cannot_reach, is_connect_failure
from tierank.resources import FINAL_JOB_STATES, is_terminal_event
from tierank.v1 import rank_pb2

# Codes that mean "the connection or server went away", not "the request is wrong".
RECONNECTABLE_CODES = frozenset({grpc.StatusCode.UNAVAILABLE})

# How often a client waiting for a server asks why it has not connected yet: a failed TLS
# handshake ends the wait at once, a server still starting is waited for.
CONNECT_CHECK_SECONDS = 0.5

# Called before each reconnect with the attempt number (1-based) and the error that caused it.
ReconnectHook = Callable[[int, TierankError], None]


# How long a stream that was connected keeps trying to come back: long enough to bridge a
# server restart (or a replica's failover), short enough that a server that is gone is said so.
DEFAULT_RECONNECT_WINDOW_SECONDS = 60.0


@dataclass(frozen=True)
class ReconnectPolicy:
    """How hard a watch tries to come back: a connection that was lost is retried for
    `window` seconds from the loss, a server never reached for `max_attempts` tries (it may
    still be starting). Both start again whenever a new event arrives."""

    window: float = DEFAULT_RECONNECT_WINDOW_SECONDS
    max_attempts: int = 8
    initial_backoff: float = 0.05
    max_backoff: float = 2.0

    def backoff(self, attempt: int) -> float:
        """Full-jitter exponential backoff, so many watchers don't reconnect in lockstep."""
        ceiling = min(self.max_backoff, self.initial_backoff * 2 ** (attempt - 1))
        return random.uniform(0, ceiling)


DEFAULT_RECONNECT_POLICY = ReconnectPolicy()


class EventCursor:
    """Remembers the job and the last sequence delivered to the caller."""

    def __init__(self, job: str = "", after_sequence: int = 0) -> None:
        self.job = job
        self.last_sequence = after_sequence
        self.finished = False

    def accept(self, event: rank_pb2.JobEvent) -> bool:
        """True if the event is new and should be delivered; records it."""
        if event.sequence <= self.last_sequence:
            return False
        self.job = self.job or event.job
        self.last_sequence = event.sequence
        self.finished = is_terminal_event(event)
        return True


class Attempts:
    """Counts consecutive failed connections and decides whether to try again.

    While every attempt failed to connect and none ever delivered anything, the server was
    never reached: retries stay silent (it may still be starting) and giving up says "cannot
    reach HOST:PORT", once. Only a connection that existed can be "lost", so only then is the
    reconnect hook told.
    """

    def __init__(self, target: str, policy: ReconnectPolicy, hook: ReconnectHook | None) -> None:
        self._target = target
        self._policy = policy
        self._hook = hook
        self._failures = 0
        self._reached = False
        self._lost_at: float | None = None

    def progressed(self) -> None:
        self._failures = 0
        self._lost_at = None
        self._reached = True

    def answered(self) -> None:
        """A call ended with the server's answer, even with no event: it was reached."""
        self._reached = True

    def next_delay(self, error: TierankError, deadline: Deadline) -> float:
        """Seconds to wait before reconnecting, or raise when it is time to give up."""
        self._failures += 1
        if error.code not in RECONNECTABLE_CODES:
            raise error
        now = time.monotonic()
        if self._lost_at is None:
            self._lost_at = now
        delay = self._policy.backoff(self._failures)
        remaining = deadline.remaining()
        never_connected = not self._reached and is_connect_failure(error)
        if never_connected:
            out_of_tries = self._failures > self._policy.max_attempts
        else:
            out_of_tries = now + delay - self._lost_at > self._policy.window
        if out_of_tries or (remaining is not None and remaining <= delay):
            raise cannot_reach(self._target, error) if never_connected else error
        if self._hook is not None and not never_connected:
            self._hook(self._failures, error)
        return delay


class Deadline:
    """An absolute deadline for a whole stream, across reconnects; None means none."""

    def __init__(self, timeout: float | None) -> None:
        self._at = None if timeout is None else time.monotonic() + timeout

    def remaining(self) -> float | None:
        return None if self._at is None else max(0.0, self._at - time.monotonic())

    def slice(self, most: float) -> float:
        """At most `most` seconds, and never past the deadline."""
        remaining = self.remaining()
        return most if remaining is None else min(most, remaining)

    def passed(self) -> bool:
        return self.remaining() == 0.0


def ended_cleanly(job: rank_pb2.Job, cursor: EventCursor) -> bool:
    """A stream that closed without a terminal event is complete only if the job is over and
    the caller already has its last event (e.g. it asked for events after the last one)."""
    return job.state in FINAL_JOB_STATES and job.last_sequence <= cursor.last_sequence


def interrupted_stream_error() -> TierankError:
    """The stream closed cleanly before a terminal event: the server went away mid-job."""
    return TierankError(grpc.StatusCode.UNAVAILABLE, "event stream ended before the job did")
