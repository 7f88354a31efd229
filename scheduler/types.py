"""Public value types of the tournament. Pure data: no I/O, no asyncio, no wire types."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Literal


@dataclass(frozen=True)
class Cost:
    """Usage counted against a budget."""

    calls: int = 0
    input_tokens: int = 0
    cost_usd: float = 0.0

    def __add__(self, other: Cost) -> Cost:
        return Cost(
            self.calls + other.calls,
            self.input_tokens + other.input_tokens,
            self.cost_usd + other.cost_usd,
        )

    def __sub__(self, other: Cost) -> Cost:
        return Cost(
            self.calls - other.calls,
            self.input_tokens - other.input_tokens,
            self.cost_usd - other.cost_usd,
        )


@dataclass(frozen=True)
class Budget:
    """Limits for one job; 0 means unlimited."""

    max_calls: int = 0
    max_input_tokens: int = 0
    max_cost_usd: float = 0.0

    def allows(self, spent: Cost) -> bool:
        return (
            (not self.max_calls or spent.calls <= self.max_calls)
            and (not self.max_input_tokens or spent.input_tokens <= self.max_input_tokens)
            and (not self.max_cost_usd or spent.cost_usd <= self.max_cost_usd + 1e-12)
        )


@dataclass(frozen=True)
class JudgeCall:
    """One batch shown to one judge."""

    # Deterministic and unique within a job, e.g. "b12.j0".
    call_id: str
    batch: int
    # Index into TournamentConfig.judge_weights.
    judge: int
    # Candidate ids in the order this judge sees them (its own seeded shuffle).
    presented: tuple[str, ...]
    # Sequential judge round-trips up to and including this call.
    depth: int


@dataclass(frozen=True)
class Verdict:
    call_id: str
    # Best first; a subset of the call's presented ids. Empty when failed.
    ordering: tuple[str, ...] = ()
    failed: bool = False
    # What the call really cost (0 for a cached verdict); settles the reservation.
    cost: Cost = field(default_factory=Cost)


@dataclass(frozen=True)
class Tier:
    rank: int  # 1 is best
    members: tuple[str, ...]
    settled: bool


class StopReason(enum.StrEnum):
    SETTLED = "settled"
    BUDGET_EXHAUSTED = "budget_exhausted"
    JUDGES_UNAVAILABLE = "judges_unavailable"
    # Nothing more a judge could resolve (e.g. every open pair is a judge tie that re-asking
    # did not break); the tiers stand as they are.
    EXHAUSTED = "exhausted"
    # The target settled, but only on votes of judges whose answers follow the positions they
    # were shown (scheduler/bias.py): the tiers stand as provisional.
    POSITION_BIASED = "position_biased"


@dataclass(frozen=True)
class TournamentConfig:
    batch_size: int = 10
    # Settle the top-K; 0 means a full ordering.
    top_k: int = 10
    # Enough for the whole first wave of 100 candidates at k=10 in one round-trip.
    max_in_flight: int = 10
    judge_weights: tuple[float, ...] = (1.0,)
    ensemble: Literal["all", "adaptive"] = "all"
    quorum: int = 2
    budget: Budget = field(default_factory=Budget)
    seed: int = 0
    # Present a batch so that pairs shown together before are shown the other way round
    # (scheduler/positions.py); off: each judge's plain seeded shuffle. On by default: it helps
    # position-biased judges wherever pairs meet again and costs unbiased ones nothing
    # measurable (bench/README.md, ranking).
    balance_positions: bool = True
