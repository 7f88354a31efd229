"""Means with 95% intervals over queries.

Each query's figure is first averaged over the seeds; the interval is a percentile bootstrap
over the queries (BOOTSTRAP_SAMPLES resamples, fixed seed), so it covers the variation between
queries as well as the judges' noise. Comparisons between two methods use the same resampling on
the per-query differences (paired), which is much tighter than comparing two separate intervals.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from tierank.bench.ranking.experiment import Record

BOOTSTRAP_SAMPLES = 2000
FIGURES = ("ndcg10", "calls", "failed_calls", "input_tokens", "critical_path", "wall_seconds")


@dataclass(frozen=True)
class Interval:
    mean: float
    low: float
    high: float


def bootstrap(values: Sequence[float]) -> Interval:
    data = np.asarray(values, dtype=float)
    rng = np.random.default_rng(0)
    means = data[rng.integers(0, len(data), size=(BOOTSTRAP_SAMPLES, len(data)))].mean(axis=1)
    low, high = np.percentile(means, [2.5, 97.5])
    return Interval(float(data.mean()), float(low), float(high))


def per_query(records: Iterable[Record], figure: str) -> dict[tuple[str, str], dict[str, float]]:
    """(scenario, method) -> qid -> the figure averaged over seeds."""
    sums: dict[tuple[str, str], dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for record in records:
        sums[(record.scenario, record.method)][record.qid].append(float(getattr(record, figure)))
    return {
        key: {qid: float(np.mean(v)) for qid, v in by_qid.items()} for key, by_qid in sums.items()
    }


def summarize(records: Sequence[Record]) -> dict[tuple[str, str], dict[str, Interval]]:
    summary: dict[tuple[str, str], dict[str, Interval]] = defaultdict(dict)
    for figure in FIGURES:
        for key, by_qid in per_query(records, figure).items():
            summary[key][figure] = bootstrap(list(by_qid.values()))
    return dict(summary)


def paired_difference(
    records: Sequence[Record], scenario: str, method: str, baseline: str, figure: str = "ndcg10"
) -> Interval:
    """method − baseline, per query, with a paired bootstrap interval."""
    values = per_query(records, figure)
    ours, theirs = values[(scenario, method)], values[(scenario, baseline)]
    return bootstrap([ours[qid] - theirs[qid] for qid in sorted(ours)])


def mean_calls_by_round(records: Iterable[Record], scenario: str, method: str) -> list[float]:
    """Average number of calls sent in round 1, 2, ... (a query that stopped earlier counts 0)."""
    rounds = [r.calls_per_round for r in records if (r.scenario, r.method) == (scenario, method)]
    if not rounds:
        return []
    width = max(len(r) for r in rounds)
    padded = np.zeros((len(rounds), width))
    for i, calls in enumerate(rounds):
        padded[i, : len(calls)] = calls
    return [float(x) for x in padded.mean(axis=0)]
