"""One method's judge calls for one query: answers them with simulated judges and charges them.

Cost model (the same for every method):
- a round is a set of calls sent at once; the method sees none of their answers before the round
  ends, so each round adds one sequential round-trip to the critical path;
- a call's simulated time is ROUND_TRIP_SECONDS plus SECONDS_PER_100_INPUT_TOKENS per 100 input
  tokens of its prompt; a round of parallel calls takes the time of its slowest call;
- an unparseable answer is charged like any other call and yields nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from tierank.bench.ranking.data import Query
from tierank.bench.ranking.judges import QueryWorld, SimulatedJudge
from tierank.bench.ranking.prompt import estimate_input_tokens

ROUND_TRIP_SECONDS = 1.5
SECONDS_PER_100_INPUT_TOKENS = 0.001


@dataclass
class Ledger:
    calls: int = 0
    failed_calls: int = 0
    input_tokens: int = 0
    wall_seconds: float = 0.0
    calls_per_round: list[int] = field(default_factory=list)

    @property
    def critical_path(self) -> int:
        return len(self.calls_per_round)


class JudgeSession:
    def __init__(
        self,
        query: Query,
        world: QueryWorld,
        judges: Sequence[SimulatedJudge],
        rng: np.random.Generator,
    ) -> None:
        self.query = query
        self.judges = tuple(judges)
        self.ledger = Ledger()
        self._world = world
        self._rng = rng
        self._tokens: dict[tuple[str, ...], int] = {}

    def input_tokens(self, presented: Sequence[str]) -> int:
        key = tuple(presented)
        if key not in self._tokens:
            texts = [self.query.passages[pid] for pid in key]
            self._tokens[key] = estimate_input_tokens(self.query.text, texts)
        return self._tokens[key]

    def ask_round(
        self, requests: Sequence[tuple[int, Sequence[str]]]
    ) -> list[tuple[str, ...] | None]:
        """Send (judge index, presented ids) calls at once; orderings in request order."""
        if not requests:
            return []
        answers = []
        slowest = 0.0
        for judge, presented in requests:
            tokens = self.input_tokens(presented)
            answer = self.judges[judge].order(self._world, tuple(presented), self._rng)
            answers.append(answer)
            self.ledger.calls += 1
            self.ledger.failed_calls += answer is None
            self.ledger.input_tokens += tokens
            slowest = max(slowest, ROUND_TRIP_SECONDS + SECONDS_PER_100_INPUT_TOKENS * tokens / 100)
        self.ledger.calls_per_round.append(len(requests))
        self.ledger.wall_seconds += slowest
        return answers

    def ask(self, presented: Sequence[str], judge: int = 0) -> tuple[str, ...] | None:
        """One call in a round of its own."""
        return self.ask_round([(judge, presented)])[0]
