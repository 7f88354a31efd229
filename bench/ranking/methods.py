"""The named methods and judge panels (scenarios) the benchmark compares."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

from tierank.bench.ranking.blitzrank import rank_blitzrank
from tierank.bench.ranking.pairwise import rank_pairwise_heapsort
from tierank.bench.ranking.session import JudgeSession
from tierank.bench.ranking.setwise import rank_setwise_heapsort
from tierank.bench.ranking.sliding_window import rank_sliding_window

Ranker = Callable[[JudgeSession, int], list[str]]


@dataclass(frozen=True)
class Method:
    name: str
    # (session, seed) -> ranking of every candidate, best first.
    rank: Ranker
    # True for methods that spread calls over several judges of a panel.
    uses_panel: bool = False


def _first_stage(session: JudgeSession, seed: int) -> list[str]:
    return list(session.query.candidates)


def _single_judge(ranker: Callable[[JudgeSession], list[str]]) -> Ranker:
    return lambda session, seed: ranker(session)


def _tournament_methods() -> list[Method]:
    """tierank's scheduler at its defaults (k=10), at k=20, with a three-judge panel, and with
    each judge sampled three times (listed three times, adaptive voting)."""
    try:
        from tierank.bench.ranking.tournament_driver import rank_tournament
        from tierank.scheduler.types import TournamentConfig
    except ImportError:
        # The scheduler is built separately; the baselines stay runnable without it.
        return []

    def tournament(samples_per_judge: int = 1, **overrides: object) -> Ranker:
        def rank(session: JudgeSession, seed: int) -> list[str]:
            judges = len(session.judges) * samples_per_judge
            config = TournamentConfig(judge_weights=(1.0,) * judges, seed=seed, **overrides)
            return rank_tournament(session, config, samples_per_judge)

        return rank

    return [
        Method("tierank", tournament()),
        Method("tierank-k20", tournament(batch_size=20)),
        Method("tierank-3-samples", tournament(samples_per_judge=3, ensemble="adaptive")),
        Method("tierank-all", tournament(ensemble="all"), uses_panel=True),
        Method("tierank-adaptive", tournament(ensemble="adaptive"), uses_panel=True),
    ]


METHODS: dict[str, Method] = {
    method.name: method
    for method in [
        Method("bm25", _first_stage),
        Method("sliding-window", _single_judge(rank_sliding_window)),
        Method("setwise-heapsort", _single_judge(rank_setwise_heapsort)),
        Method("prp-heapsort", _single_judge(rank_pairwise_heapsort)),
        Method("blitzrank-k10", _single_judge(partial(rank_blitzrank, k=10))),
        Method("blitzrank-k20", _single_judge(partial(rank_blitzrank, k=20))),
        *_tournament_methods(),
    ]
}

SINGLE_JUDGE_METHODS = [name for name, method in METHODS.items() if not method.uses_panel]
PANEL_METHODS = ["bm25", *(name for name, method in METHODS.items() if method.uses_panel)]

# Scenario -> the methods run on it by default. Single-judge methods see only the panel's first
# judge, so the ensemble scenario runs the panel methods only.
DEFAULT_METHODS: dict[str, list[str]] = {
    "strong": SINGLE_JUDGE_METHODS,
    "weak": SINGLE_JUDGE_METHODS,
    "ensemble": PANEL_METHODS,
}
SMOKE_METHODS = [
    name for name in ("bm25", "sliding-window", "blitzrank-k10", "tierank") if name in METHODS
]
