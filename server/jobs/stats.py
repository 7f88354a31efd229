"""Per-job usage accounting, per judge and in total, rebuilt from verdicts on replay."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from tierank.scheduler.bias import PositionBias
from tierank.server.judges.base import FailureKind, JudgeFailure
from tierank.v1 import rank_pb2

# How a failure_reason of a call refused by an open circuit breaker begins.
_BREAKER_REFUSAL = str(JudgeFailure(FailureKind.UNAVAILABLE, ""))


@dataclass
class _JudgeBook:
    name: str
    calls: int = 0
    failed: int = 0
    cached: int = 0
    consecutive_failures: int = 0
    last_error: str = ""
    disabled: bool = False
    # Dropped from the job while its provider's breaker was open (its latest failure a refusal).
    dropped_by_breaker: bool = False
    abandoned: int = 0
    # How the job's spec says the judge was admitted (JudgeSpec.admitted_unqualified, ...).
    admitted_unqualified: bool = False
    admission_note: str = ""

    def __post_init__(self) -> None:
        self.usage = rank_pb2.Usage()
        # Each answered call's latency, for what counts as a stalled request (runner.py).
        self.latencies: list[float] = []


class StatsBook:
    def __init__(
        self, judge_names: list[str], admissions: Sequence[rank_pb2.JudgeSpec] = ()
    ) -> None:
        """`admissions`: the judges as the job's stored spec has them, for what admission
        said of each (none: nothing to say)."""
        self._judges = [_JudgeBook(name) for name in judge_names]
        for book, admitted in zip(self._judges, admissions, strict=False):
            book.admitted_unqualified = admitted.admitted_unqualified
            book.admission_note = admitted.admission_note

    def add(self, judge: int, verdict: rank_pb2.VerdictReceived) -> int:
        """Count one verdict; returns the judge's consecutive failures so far."""
        book = self._judges[judge]
        if verdict.cached:
            book.cached += 1
        else:
            book.calls += 1
            usage = book.usage
            usage.input_tokens += verdict.usage.input_tokens
            usage.output_tokens += verdict.usage.output_tokens
            usage.cached_input_tokens += verdict.usage.cached_input_tokens
            usage.cache_write_input_tokens += verdict.usage.cache_write_input_tokens
            usage.cost_usd += verdict.usage.cost_usd
            usage.latency_seconds += verdict.usage.latency_seconds
        if verdict.failed:
            book.failed += 1
            book.consecutive_failures += 1
            book.last_error = verdict.failure_reason
        else:
            book.consecutive_failures = 0
            if not verdict.cached:
                book.latencies.append(verdict.usage.latency_seconds)
        return book.consecutive_failures

    def latencies(self, judge: int) -> list[float]:
        """The latencies of the judge's answered calls, in the order they were recorded."""
        return self._judges[judge].latencies

    def abandon(self, judge: int) -> None:
        """Count a call that the job's end left unanswered."""
        self._judges[judge].abandoned += 1

    def disable(self, judge: int) -> None:
        """Drop a judge from the job, remembering whether an open breaker refused its latest
        failed call (the breaker may have closed again by the time the job ends)."""
        book = self._judges[judge]
        book.disabled = True
        book.dropped_by_breaker = book.last_error.startswith(_BREAKER_REFUSAL)

    def disabled(self, judge: int) -> bool:
        return self._judges[judge].disabled

    def to_proto(
        self,
        critical_path: int,
        position_bias: list[PositionBias],
        agreement: list[float | None] | None,
        settled: int,
        total: int,
        wall_seconds: float,
        breakers_open: Sequence[bool],
    ) -> rank_pb2.JobStats:
        """The stats as of now; `breakers_open` says, per judge, whether its provider's breaker
        is open now, so that breaker_open agrees with a last_error of "circuit open"."""
        judges = [
            rank_pb2.JudgeStats(
                judge=b.name,
                calls=b.calls,
                failed_calls=b.failed,
                cached_calls=b.cached,
                usage=b.usage,
                agreement_rate=rate if rate is not None else 0.0,
                last_error=b.last_error,
                breaker_open=b.dropped_by_breaker or breaker_open,
                abandoned_calls=b.abandoned,
                admitted_unqualified=b.admitted_unqualified,
                admission_note=b.admission_note,
                position_bias=rank_pb2.PositionBias(
                    verdicts=bias.verdicts,
                    mean_tau=bias.mean_tau,
                    z=bias.z,
                    biased=bias.flagged,
                    first_pick_position=bias.first_pick_position,
                    first_pick_z=bias.first_pick_z,
                ),
            )
            for b, rate, bias, breaker_open in zip(
                self._judges,
                agreement or [None] * len(self._judges),
                position_bias,
                breakers_open,
                strict=True,
            )
        ]
        return rank_pb2.JobStats(
            judge_calls=sum(b.calls for b in self._judges),
            cached_calls=sum(b.cached for b in self._judges),
            failed_calls=sum(b.failed for b in self._judges),
            input_tokens=sum(b.usage.input_tokens for b in self._judges),
            output_tokens=sum(b.usage.output_tokens for b in self._judges),
            cached_input_tokens=sum(b.usage.cached_input_tokens for b in self._judges),
            cache_write_input_tokens=sum(b.usage.cache_write_input_tokens for b in self._judges),
            cost_usd=sum(b.usage.cost_usd for b in self._judges),
            critical_path=critical_path,
            judges=judges,
            wall_seconds=wall_seconds,
            settled_count=settled,
            total_count=total,
            abandoned_calls=sum(b.abandoned for b in self._judges),
        )
