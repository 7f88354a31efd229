"""Run methods over queries, seeds and judge panels: one record per task and query."""

from __future__ import annotations

import math
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass

import numpy as np

from tierank.bench.ranking.calibration import discordance
from tierank.bench.ranking.data import Query
from tierank.bench.ranking.judges import PANELS, QueryWorld, SimulatedJudge
from tierank.bench.ranking.methods import METHODS
from tierank.bench.ranking.ndcg import ndcg_at
from tierank.bench.ranking.session import JudgeSession
from tierank.server.judges.simulated import JudgeProfile, seeded_rng

# Qualification: each judge's pair accuracy is measured with random batches of this size on
# seeds no benchmark run uses (runs take seeds 0, 1, 2, ...), and on the other queries only.
QUALIFICATION_BATCH_SIZE = 10
QUALIFICATION_SEEDS = (10_000, 10_001)
# Pair accuracy is clipped here before its log-odds, so a perfect judge gets a finite weight.
MAX_ACCURACY_FOR_WEIGHT = 0.99


@dataclass(frozen=True)
class Record:
    scenario: str
    method: str
    seed: int
    qid: str
    ndcg10: float
    calls: int
    failed_calls: int
    input_tokens: int
    critical_path: int
    wall_seconds: float
    calls_per_round: tuple[int, ...]
    # The panel's answers of two or more candidates, those that ranked the first-shown one
    # first, and those that repeated the shown order.
    answers: int
    first_shown_first: int
    repeated_shown: int
    # The weight each judge of the panel voted with.
    judge_weights: tuple[float, ...]


@dataclass(frozen=True)
class Task:
    scenario: str
    method: str
    seed: int


def run_task(task: Task, queries: Sequence[Query]) -> list[Record]:
    profiles = PANELS[task.scenario]
    method = METHODS[task.method]
    if method.weights == "equal":
        weights = {query.qid: (1.0,) * len(profiles) for query in queries}
    else:
        weights = qualified_weights(queries, profiles)
        if method.weights == "usable":
            weights = {
                qid: tuple(1.0 if w else 0.0 for w in judges) for qid, judges in weights.items()
            }
    records = []
    for query in queries:
        judges = [SimulatedJudge(profile) for profile in profiles]
        session = JudgeSession(
            query,
            QueryWorld(query, task.seed),
            judges,
            seeded_rng(
                task.seed, "judge-noise", task.scenario, method.noise_of or method.name, query.qid
            ),
        )
        ranking = method.rank(session, task.seed, weights[query.qid])
        ledger = session.ledger
        records.append(
            Record(
                scenario=task.scenario,
                method=task.method,
                seed=task.seed,
                qid=query.qid,
                ndcg10=ndcg_at(ranking, query.qrels),
                calls=ledger.calls,
                failed_calls=ledger.failed_calls,
                input_tokens=ledger.input_tokens,
                critical_path=ledger.critical_path,
                wall_seconds=ledger.wall_seconds,
                calls_per_round=tuple(ledger.calls_per_round),
                answers=sum(judge.positions.answers for judge in judges),
                first_shown_first=sum(judge.positions.first_shown_first for judge in judges),
                repeated_shown=sum(judge.positions.repeated_shown for judge in judges),
                judge_weights=weights[query.qid],
            )
        )
    return records


def qualified_weights(
    queries: Sequence[Query], profiles: Sequence[JudgeProfile]
) -> dict[str, tuple[float, ...]]:
    """Per query, each judge's weight as `tierank qualify` would set it from a labelled set:
    the other queries at QUALIFICATION_SEEDS (held out from the query's own run and seeds).

    The weight is the log-odds of the judge's pair accuracy (the share of pairs of different
    human grades an answer orders as the grades do, averaged over queries), 0 when its 95%
    interval reaches 0.5 (at chance). The interval is over queries: the pairs of one answer
    are not independent trials.
    """
    if len(queries) < 3:
        raise ValueError("qualified weights need at least 3 queries (2 held in for each)")
    # counts[judge, query] = (misordered, compared)
    counts = np.array(
        [
            [
                np.sum(
                    [discordance(q, p, QUALIFICATION_BATCH_SIZE, s) for s in QUALIFICATION_SEEDS],
                    axis=0,
                )
                for q in queries
            ]
            for p in profiles
        ],
        dtype=float,
    )
    weights = {}
    for held_out, query in enumerate(queries):
        others = np.delete(counts, held_out, axis=1)
        weights[query.qid] = tuple(_weight(judge[:, 0], judge[:, 1]) for judge in others)
    return weights


def _weight(misordered: np.ndarray, compared: np.ndarray) -> float:
    answered = compared > 0
    per_query = 1 - misordered[answered] / compared[answered]
    accuracy = per_query.mean()
    if accuracy - 1.96 * per_query.std(ddof=1) / math.sqrt(len(per_query)) <= 0.5:
        return 0.0
    accuracy = min(accuracy, MAX_ACCURACY_FOR_WEIGHT)
    return math.log(accuracy / (1 - accuracy))


def run_all(tasks: Sequence[Task], queries: Sequence[Query], workers: int) -> list[Record]:
    """Records in task order, whatever the number of workers (each task seeds its own streams)."""
    if workers <= 1:
        return [record for task in tasks for record in run_task(task, queries)]
    with ProcessPoolExecutor(workers) as pool:
        chunks = pool.map(run_task, tasks, [queries] * len(tasks))
        return [record for chunk in chunks for record in chunk]


def ideal_ndcg(queries: Sequence[Query]) -> dict[str, float]:
    """nDCG@10 of the best possible reordering of each query's candidates."""
    return {
        query.qid: ndcg_at(sorted(query.candidates, key=lambda pid: -query.grade(pid)), query.qrels)
        for query in queries
    }
