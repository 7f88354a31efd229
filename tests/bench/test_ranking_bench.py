"""The ranking benchmark: nDCG against trec_eval, baselines with a perfect judge, the smoke run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tierank.bench.ranking.__main__ import main
from tierank.bench.ranking.calibration import cyclic_triples
from tierank.bench.ranking.data import DEFAULT_DATA_DIR, load_queries
from tierank.bench.ranking.experiment import Task, ideal_ndcg, run_task
from tierank.bench.ranking.judges import ORACLE, STRONG, WEAK
from tierank.bench.ranking.methods import METHODS
from tierank.bench.ranking.ndcg import ndcg_at

TREC_EVAL_REF = DEFAULT_DATA_DIR.parent / "trec_eval-ref" / "dl19.bm25top100.ndcg.q.txt"

pytestmark = pytest.mark.skipif(not DEFAULT_DATA_DIR.exists(), reason="shared TREC data missing")


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


def test_same_seed_same_answers(queries):
    first = run_task(Task("strong", "blitzrank-k10", seed=3), queries[:2])
    again = run_task(Task("strong", "blitzrank-k10", seed=3), queries[:2])
    other = run_task(Task("strong", "blitzrank-k10", seed=4), queries[:2])
    assert first == again
    assert first != other


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
