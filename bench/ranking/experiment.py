"""Run methods over queries, seeds and judge panels: one record per task and query."""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass

from tierank.bench.ranking.data import Query
from tierank.bench.ranking.judges import PANELS, QueryWorld, SimulatedJudge, seeded_rng
from tierank.bench.ranking.methods import METHODS
from tierank.bench.ranking.ndcg import ndcg_at
from tierank.bench.ranking.session import JudgeSession


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


@dataclass(frozen=True)
class Task:
    scenario: str
    method: str
    seed: int


def run_task(task: Task, queries: Sequence[Query]) -> list[Record]:
    judges = [SimulatedJudge(profile) for profile in PANELS[task.scenario]]
    method = METHODS[task.method]
    records = []
    for query in queries:
        session = JudgeSession(
            query,
            QueryWorld(query, task.seed),
            judges,
            seeded_rng(task.seed, "judge-noise", task.scenario, task.method, query.qid),
        )
        ranking = method.rank(session, task.seed)
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
            )
        )
    return records


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
