"""The ranking benchmark: nDCG against trec_eval, baselines with a perfect judge, the smoke run,
the position-biased judge's calibration and weights from qualification."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest
from shared_data import SHARED_DATA

from tierank.bench.ranking.__main__ import main
from tierank.bench.ranking.blitzrank_published import (
    EdgeGraph,
    adjacent_edges,
    rank_blitzrank_published,
)
from tierank.bench.ranking.calibration import cyclic_triples
from tierank.bench.ranking.data import load_queries
from tierank.bench.ranking.experiment import Task, ideal_ndcg, qualified_weights, run_task
from tierank.bench.ranking.judges import ORACLE, PANELS, QueryWorld, SimulatedJudge
from tierank.bench.ranking.methods import METHODS
from tierank.bench.ranking.ndcg import ndcg_at
from tierank.server.judges.simulated import (
    CHANCE,
    STRONG,
    STRONG_POSITION,
    WEAK,
    WEAK_POSITION,
    JudgeProfile,
    seeded_rng,
)

TREC_EVAL_REF = SHARED_DATA / "trec_eval-ref" / "dl19.bm25top100.ndcg.q.txt"

pytestmark = pytest.mark.usefixtures("shared_data")


@pytest.fixture(scope="module")
def queries():
    return load_queries()


def test_ndcg10_matches_trec_eval_per_query(queries):
    reference = {}
    for line in TREC_EVAL_REF.read_text().splitlines():
        measure, qid, value = line.split()
        if measure == "ndcg_cut_10":
            reference[qid] = float(value)
    assert len(queries) == 43
    for query in queries:
        assert ndcg_at(query.candidates, query.qrels) == pytest.approx(
            reference[query.qid], abs=6e-5
        )


@pytest.mark.parametrize("method", [m for m in METHODS if m != "bm25"])
def test_noise_free_judge_finds_the_ideal_top10(queries, method):
    records = run_task(Task("oracle", method, seed=0), queries[:4])
    ideal = ideal_ndcg(queries[:4])
    for record in records:
        assert record.calls > 0
        assert record.ndcg10 == pytest.approx(ideal[record.qid])


@pytest.mark.parametrize("method", ["blitzrank-k10", "blitzrank-all-pairs-k10"])
def test_same_seed_same_answers(queries, method):
    first = run_task(Task("strong", method, seed=3), queries[:2])
    again = run_task(Task("strong", method, seed=3), queries[:2])
    other = run_task(Task("strong", method, seed=4), queries[:2])
    assert first == again
    assert first != other


class _ScriptedSession:
    """A perfect judge over candidates c0, c1, ... (c0 best), shown in reverse retrieval order;
    the calls listed in ``unparseable`` answer nothing."""

    def __init__(self, n: int, unparseable: frozenset[int] = frozenset()) -> None:
        self.query = SimpleNamespace(candidates=[f"c{i}" for i in range(n)][::-1])
        self.batches: list[tuple[str, ...]] = []
        self.answers: list[tuple[str, ...] | None] = []
        self._unparseable = unparseable

    def ask(self, presented):
        self.batches.append(tuple(presented))
        answer = None
        if len(self.batches) - 1 not in self._unparseable:
            answer = tuple(sorted(presented, key=lambda pid: int(pid[1:])))
        self.answers.append(answer)
        return answer


def test_published_blitzrank_turns_an_ordering_of_k_into_its_k_minus_1_adjacent_edges():
    assert adjacent_edges([4, 2, 3, 0]) == [(4, 2), (2, 3), (3, 0)]
    graph = EdgeGraph(5)
    graph.add(adjacent_edges([4, 2, 3, 0]))
    assert int(graph.edges.sum()) == 3
    # 4 > 0 is known only by transitivity; 1 was never shown, so nobody knows it yet.
    assert graph.reach[4, 0] and not graph.edges[4, 0]
    assert graph.known.tolist() == [3, 0, 3, 3, 3]


def test_published_blitzrank_partitions_the_pool_then_stops_once_top_m_are_finalized():
    n, k, top_m = 35, 10, 5
    session = _ScriptedSession(n)
    ranking = rank_blitzrank_published(session, k=k, top_m=top_m)
    ids = session.query.candidates
    assert ranking[:top_m] == [f"c{i}" for i in range(top_m)]
    # Uncompared candidates sort first, in retrieval order: the pool is dealt out in order, and
    # the last, short deal is filled up with undefeated ones.
    assert session.batches[:3] == [tuple(ids[start : start + k]) for start in range(0, 30, k)]
    assert session.batches[3][:5] == tuple(ids[30:])
    assert len(session.batches[3]) == k
    position = {pid: i for i, pid in enumerate(ids)}
    graph = EdgeGraph(n)
    finalized_after_each_call = []
    for answer in session.answers:
        graph.add(adjacent_edges([position[pid] for pid in answer]))
        finalized_after_each_call.append(len(graph.progress(k)[0]))
    assert finalized_after_each_call[-1] >= top_m
    assert all(count < top_m for count in finalized_after_each_call[:-1])


def test_published_blitzrank_asks_again_after_an_unparseable_answer():
    session = _ScriptedSession(30, unparseable=frozenset({1}))
    ranking = rank_blitzrank_published(session, k=10, top_m=3)
    assert session.batches[2] == session.batches[1]
    assert session.answers[1] is None
    assert ranking[:3] == ["c0", "c1", "c2"]


def test_published_blitzrank_costs_fewer_calls_than_all_pairs(queries):
    def mean_calls(method: str) -> float:
        records = run_task(Task("strong", method, seed=0), queries[:20])
        return sum(record.calls for record in records) / len(records)

    assert mean_calls("blitzrank-k10") < mean_calls("blitzrank-all-pairs-k10")


def test_weak_judge_forms_more_cycles_than_strong(queries):
    strong = sum(cyclic_triples(q, STRONG, 0).cyclic for q in queries[:5])
    weak = sum(cyclic_triples(q, WEAK, 0).cyclic for q in queries[:5])
    oracle = sum(cyclic_triples(q, ORACLE, 0).cyclic for q in queries[:5])
    assert oracle == 0 < strong < weak


def test_smoke_run_writes_sane_results(tmp_path: Path):
    main(["run", "--smoke", "--workers", "1", "--out", str(tmp_path)])
    summary = json.loads((tmp_path / "results" / "summary.json").read_text())
    rows = {(row["scenario"], row["method"]): row for row in summary["methods"]}
    assert {scenario for scenario, _ in rows} == {"oracle", "strong"}
    for (scenario, method), row in rows.items():
        if method != "bm25":
            assert row["calls"]["mean"] > 0
            assert row["input_tokens"]["mean"] > row["calls"]["mean"]
            assert row["critical_path"]["mean"] >= 1
        if scenario == "oracle" and method != "bm25":
            assert row["ndcg10"]["mean"] == pytest.approx(summary["ideal_ndcg10"])
        assert 0 <= row["ndcg10"]["low"] <= row["ndcg10"]["mean"] <= row["ndcg10"]["high"] <= 1
    for name in ("strong-ndcg-vs-tokens.png", "strong-ndcg-vs-critical-path.png"):
        assert (tmp_path / "results" / name).stat().st_size > 1000
    assert "| blitzrank-k10 |" in (tmp_path / "RESULTS.md").read_text()


def _position_shares(queries, profile: JudgeProfile, k: int = 10) -> tuple[float, float]:
    """Shares of answers to random k-batches that rank the first-shown candidate first, and that
    repeat the shown order."""
    judge = SimulatedJudge(profile)
    for seed in range(100, 105):
        for query in queries:
            world = QueryWorld(query, seed)
            rng = seeded_rng(seed, "position-profile", query.qid)
            for _ in range(20):
                judge.order(world, tuple(rng.choice(query.candidates, size=k, replace=False)), rng)
    counts = judge.positions
    return counts.first_shown_first / counts.answers, counts.repeated_shown / counts.answers


@pytest.mark.parametrize("profile", [STRONG_POSITION, WEAK_POSITION, CHANCE])
def test_position_biased_judges_have_the_real_judges_profile_at_k10(queries, profile):
    """Qwen2.5-Coder-1.5B on DL19: the first-shown passage first in 40% of its answers, the
    shown order repeated in 22%."""
    first, repeated = _position_shares(queries, profile)
    assert first == pytest.approx(0.40, abs=0.03)
    assert repeated == pytest.approx(0.22, abs=0.03)


def test_unbiased_judges_rank_the_first_shown_first_about_once_in_k(queries):
    first, repeated = _position_shares(queries, STRONG)
    assert first == pytest.approx(0.1, abs=0.03)
    assert repeated == 0


def test_qualification_gives_the_judge_at_chance_no_weight(queries):
    panel = PANELS["chance-ensemble"]
    weights = qualified_weights(queries[:12], panel)
    assert len(weights) == 12
    for strong_primacy, chance, strong_long in weights.values():
        assert chance == 0
        assert 1.2 < strong_primacy < 2.5 and 1.2 < strong_long < 2.5


def test_weighted_ensemble_beats_equal_weights_with_one_judge_at_chance(queries):
    """Issue 16: the weights from qualification against equal weights, three seeds, every query."""
    differences = []
    for seed in range(3):
        weighted = run_task(Task("chance-ensemble", "tierank-all-weighted", seed), queries)
        equal = run_task(Task("chance-ensemble", "tierank-all", seed), queries)
        differences += [w.ndcg10 - e.ndcg10 for w, e in zip(weighted, equal, strict=True)]
    assert sum(differences) / len(differences) > 0.01
