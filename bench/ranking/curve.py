"""Quality against cost: tierank at per-query input-token budgets beside the baselines.

The budgets are set from the run itself: the baselines go first, then tierank at multiples of
faithful BlitzRank-k10's mean input tokens per query in the same scenario, and at the sliding
window's. Each query's job gets the same budget (TournamentConfig.budget.max_input_tokens).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from tierank.bench.ranking.data import Query
from tierank.bench.ranking.experiment import Record, Task, run_all
from tierank.bench.ranking.methods import budget_method_name
from tierank.bench.ranking.stats import summarize

REFERENCE = "blitzrank-k10"
SLIDING_WINDOW = "sliding-window"
BASELINES = (
    "bm25",
    SLIDING_WINDOW,
    "setwise-heapsort",
    REFERENCE,
    "blitzrank-k20",
    "blitzrank-all-pairs-k10",
    "tierank",
)
DEFAULT_MULTIPLES = (0.6, 0.7, 0.8, 0.9, 1.0, 1.1, 1.25, 1.5)
DEFAULT_SCENARIOS = ("strong", "weak")


@dataclass(frozen=True)
class BudgetPoint:
    scenario: str
    # Budget / the reference's mean spend; for the sliding window's point, its spend's ratio.
    multiple: float
    tokens: int
    # Whose mean spend set the budget: REFERENCE (times `multiple`) or SLIDING_WINDOW.
    set_by: str

    @property
    def method(self) -> str:
        return budget_method_name(self.tokens)


@dataclass(frozen=True)
class CurveRun:
    records: list[Record]
    # Scenario -> the reference's and the sliding window's mean input tokens per query.
    spend: dict[str, dict[str, float]]
    points: list[BudgetPoint]


def budget_points(
    spend: dict[str, dict[str, float]], multiples: Sequence[float]
) -> list[BudgetPoint]:
    """Per scenario, a point per multiple of the reference's spend and one at the sliding
    window's, in increasing budget."""
    points = []
    for scenario, means in spend.items():
        reference = means[REFERENCE]
        ours = [
            BudgetPoint(scenario, multiple, round(multiple * reference), REFERENCE)
            for multiple in multiples
        ]
        sliding = round(means[SLIDING_WINDOW])
        ours.append(BudgetPoint(scenario, sliding / reference, sliding, SLIDING_WINDOW))
        points += sorted(ours, key=lambda point: point.tokens)
    return points


def run_curve(
    queries: Sequence[Query],
    scenarios: Sequence[str],
    seeds: Sequence[int],
    multiples: Sequence[float],
    workers: int,
) -> CurveRun:
    baseline_tasks = [
        Task(scenario, method, seed)
        for scenario in scenarios
        for method in BASELINES
        for seed in seeds
    ]
    records = run_all(baseline_tasks, queries, workers)
    summary = summarize(records)
    spend = {
        scenario: {
            method: summary[(scenario, method)]["input_tokens"].mean
            for method in (REFERENCE, SLIDING_WINDOW)
        }
        for scenario in scenarios
    }
    points = budget_points(spend, multiples)
    # Two points of one budget (a multiple landing on the sliding window's spend) share a run.
    budgeted = dict.fromkeys((point.scenario, point.method) for point in points)
    records += run_all(
        [Task(scenario, method, seed) for scenario, method in budgeted for seed in seeds],
        queries,
        workers,
    )
    return CurveRun(records, spend, points)
