"""The named methods and judge panels (scenarios) the benchmark compares."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any, Literal

from tierank.bench.ranking.blitzrank import rank_blitzrank_all_pairs
from tierank.bench.ranking.blitzrank_published import rank_blitzrank_published
from tierank.bench.ranking.pairwise import rank_pairwise_heapsort
from tierank.bench.ranking.session import JudgeSession
from tierank.bench.ranking.setwise import rank_setwise_heapsort
from tierank.bench.ranking.sliding_window import rank_sliding_window

# (session, seed, a weight per judge of the panel) -> ranking of every candidate, best first.
Ranker = Callable[[JudgeSession, int, Sequence[float]], list[str]]


@dataclass(frozen=True)
class Method:
    name: str
    rank: Ranker
    # True for methods that spread calls over several judges of a panel.
    uses_panel: bool = False
    # How the judges of a panel are weighted: "equal" (1 each); from their qualification
    # (experiment.qualified_weights): "log-odds" of pair accuracy, 0 at chance; or "usable":
    # 1, and 0 at chance.
    weights: Literal["equal", "log-odds", "usable"] = "equal"
    # The method whose judge-noise stream this one draws (default: its own). A variant that
    # shares its reference's stream sees the same answers wherever it asks the same calls, so
    # their paired difference measures the variant rather than the noise.
    noise_of: str = ""


def _first_stage(session: JudgeSession, seed: int, weights: Sequence[float]) -> list[str]:
    return list(session.query.candidates)


def _single_judge(ranker: Callable[[JudgeSession], list[str]]) -> Ranker:
    return lambda session, seed, weights: ranker(session)


def tournament(samples_per_judge: int = 1, **overrides: Any) -> Ranker:
    """tierank's scheduler with TournamentConfig `overrides`; with `samples_per_judge` = n,
    each judge of the panel is listed n times (tournament_driver explains)."""
    from tierank.bench.ranking.tournament_driver import rank_tournament
    from tierank.scheduler.types import TournamentConfig

    def rank(session: JudgeSession, seed: int, weights: Sequence[float]) -> list[str]:
        copies = tuple(w for w in weights for _ in range(samples_per_judge))
        config = TournamentConfig(judge_weights=copies, seed=seed, **overrides)
        return rank_tournament(session, config, samples_per_judge)

    return rank


def _scheduler_available() -> bool:
    try:
        import tierank.scheduler  # noqa: F401
    except ImportError:
        # The scheduler is built separately; the baselines stay runnable without it.
        return False
    return True


def _tournament_methods() -> list[Method]:
    """tierank's scheduler at its defaults (k=10), at k=20, with a three-judge panel (equal
    weights, or weights from the judges' qualification), and with each judge sampled three times
    (listed three times, adaptive voting); "-shuffle-only": each call in the judge's own
    shuffle, without balancing where pairs were shown before (the default until issue 16)."""
    if not _scheduler_available():
        return []
    shuffle_only = {"balance_positions": False}
    return [
        Method("tierank", tournament()),
        Method("tierank-shuffle-only", tournament(**shuffle_only), noise_of="tierank"),
        Method("tierank-k20", tournament(batch_size=20)),
        Method("tierank-3-samples", tournament(samples_per_judge=3, ensemble="adaptive")),
        Method(
            "tierank-3-samples-shuffle-only",
            tournament(samples_per_judge=3, ensemble="adaptive", **shuffle_only),
            noise_of="tierank-3-samples",
        ),
        Method("tierank-all", tournament(ensemble="all"), uses_panel=True),
        Method(
            "tierank-all-shuffle-only",
            tournament(ensemble="all", **shuffle_only),
            uses_panel=True,
            noise_of="tierank-all",
        ),
        Method(
            "tierank-all-weighted",
            tournament(ensemble="all"),
            uses_panel=True,
            weights="log-odds",
            noise_of="tierank-all",
        ),
        Method(
            "tierank-all-usable",
            tournament(ensemble="all"),
            uses_panel=True,
            weights="usable",
            noise_of="tierank-all",
        ),
        Method("tierank-adaptive", tournament(ensemble="adaptive"), uses_panel=True),
        Method(
            "tierank-adaptive-shuffle-only",
            tournament(ensemble="adaptive", **shuffle_only),
            uses_panel=True,
            noise_of="tierank-adaptive",
        ),
        Method(
            "tierank-adaptive-weighted",
            tournament(ensemble="adaptive"),
            uses_panel=True,
            weights="log-odds",
            noise_of="tierank-adaptive",
        ),
        Method(
            "tierank-adaptive-usable",
            tournament(ensemble="adaptive"),
            uses_panel=True,
            weights="usable",
            noise_of="tierank-adaptive",
        ),
    ]


BUDGET_PREFIX = "tierank-budget-"


def budget_method_name(max_input_tokens: int) -> str:
    return f"{BUDGET_PREFIX}{max_input_tokens}"


def budgeted_tierank(max_input_tokens: int) -> Method:
    """tierank at its defaults with a per-query budget of input tokens. It draws tierank's
    noise stream, so wherever it asks tierank's calls it gets tierank's answers and its paired
    difference with tierank measures the budget rather than the noise."""
    from tierank.scheduler.types import Budget

    return Method(
        budget_method_name(max_input_tokens),
        tournament(budget=Budget(max_input_tokens=max_input_tokens)),
        noise_of="tierank",
    )


class _Methods(dict[str, Method]):
    """The named methods. A budgeted tierank's name (budget_method_name) is built when looked
    up, so that worker processes resolve the budgets their parent chose at run time; iterating
    lists the fixed methods only."""

    def _budget_of(self, name: object) -> int | None:
        if not isinstance(name, str) or not super().__contains__("tierank"):
            return None
        tokens = name.removeprefix(BUDGET_PREFIX)
        if name.startswith(BUDGET_PREFIX) and tokens.isdigit() and int(tokens) > 0:
            return int(tokens)
        return None

    def __missing__(self, name: str) -> Method:
        tokens = self._budget_of(name)
        if tokens is None:
            raise KeyError(name)
        return budgeted_tierank(tokens)

    def __contains__(self, name: object) -> bool:
        return super().__contains__(name) or self._budget_of(name) is not None


METHODS: dict[str, Method] = _Methods(
    (method.name, method)
    for method in [
        Method("bm25", _first_stage),
        Method("sliding-window", _single_judge(rank_sliding_window)),
        Method("setwise-heapsort", _single_judge(rank_setwise_heapsort)),
        Method("prp-heapsort", _single_judge(rank_pairwise_heapsort)),
        # "blitzrank-kN": BlitzRank as its published code behaves (adjacent-pair edges);
        # "blitzrank-all-pairs-kN": the same rounds with all C(k,2) votes of a verdict, a
        # stronger and costlier method. Both draw one noise stream, so where they ask the
        # same call they get the same answer.
        Method("blitzrank-k10", _single_judge(partial(rank_blitzrank_published, k=10))),
        Method("blitzrank-k20", _single_judge(partial(rank_blitzrank_published, k=20))),
        Method(
            "blitzrank-all-pairs-k10",
            _single_judge(partial(rank_blitzrank_all_pairs, k=10)),
            noise_of="blitzrank-k10",
        ),
        Method(
            "blitzrank-all-pairs-k20",
            _single_judge(partial(rank_blitzrank_all_pairs, k=20)),
            noise_of="blitzrank-k20",
        ),
        *_tournament_methods(),
    ]
)

SINGLE_JUDGE_METHODS = [name for name, method in METHODS.items() if not method.uses_panel]
PANEL_METHODS = ["bm25", *(name for name, method in METHODS.items() if method.uses_panel)]

# The position-biased judges run the single-judge methods that answer whether balancing helps,
# beside the first stage and the two best-known baselines.
POSITION_METHODS = [
    "bm25",
    "sliding-window",
    "blitzrank-k10",
    *(name for name in SINGLE_JUDGE_METHODS if name.startswith("tierank") and "k20" not in name),
]

# Scenario -> the methods run on it by default. Single-judge methods see only the panel's first
# judge, so the ensemble scenarios run the panel methods only.
DEFAULT_METHODS: dict[str, list[str]] = {
    "strong": SINGLE_JUDGE_METHODS,
    "weak": SINGLE_JUDGE_METHODS,
    "ensemble": PANEL_METHODS,
    "strong-position": POSITION_METHODS,
    "weak-position": POSITION_METHODS,
    "chance-ensemble": PANEL_METHODS,
}
SMOKE_METHODS = [
    name for name in ("bm25", "sliding-window", "blitzrank-k10", "tierank") if name in METHODS
]
