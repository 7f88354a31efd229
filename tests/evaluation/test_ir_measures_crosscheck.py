"""Cross-check against ir-measures (test-only dependency) on the five DL19 runs."""

from __future__ import annotations

import ir_measures
import pytest

from tierank.evaluation import evaluate, read_qrels, read_run

RUNS = ["BM25", "BM25_RM3", "D_BERT_KD_TASB", "OPEN_AI_ADA2", "SPLADE_P_P_ENSEMBLE_DISTIL"]
MEASURES = [
    "nDCG@10",
    "nDCG",
    "RR",
    "RR@10",
    "RR(rel=2)@10",
    "P@10",
    "P(rel=2)@10",
    "R@100",
    "R(rel=2)@100",
    "AP",
    "AP(rel=2)",
    "Rprec(rel=2)",
    "Success(rel=2)@5",
    "Judged@10",
]


@pytest.fixture(scope="module")
def dl19_qrels(shared_data):
    return read_qrels(shared_data / "trec-dl" / "qrels.dl19-passage.txt")


@pytest.mark.parametrize("retriever", RUNS)
def test_matches_ir_measures(shared_data, dl19_qrels, retriever):
    run = read_run(shared_data / "trec-dl" / "runs" / f"run.rankllm.{retriever}.dl19.top100.trec")
    ours = evaluate(MEASURES, dl19_qrels, run)
    theirs = {}
    for metric in ir_measures.iter_calc(
        [ir_measures.parse_measure(m) for m in MEASURES], dl19_qrels, run
    ):
        theirs[(str(metric.measure), metric.query_id)] = metric.value
    checked = 0
    for measure, values in ours.per_query.items():
        for qid, value in values.items():
            assert value == pytest.approx(theirs[(str(measure), qid)], abs=1e-9), (measure, qid)
            checked += 1
    assert checked == len(MEASURES) * 43


def test_tied_scores_follow_trec_eval(tmp_path):
    """Equal scores: trec_eval (pytrec_eval is its C code) puts the larger docid first."""
    qrels = {"q": {"a": 1, "b": 0, "c": 0}}
    run = {"q": {"a": 1.0, "b": 1.0, "c": 1.0}}
    ours = evaluate(["RR", "P@1"], qrels, run)
    theirs = {
        str(m.measure): m.value
        for m in ir_measures.pytrec_eval.iter_calc(
            [ir_measures.parse_measure("RR"), ir_measures.parse_measure("P@1")], qrels, run
        )
    }
    # Under trec_eval's order ("c", "b", "a") the relevant "a" is third.
    assert theirs == {"RR": pytest.approx(1 / 3), "P@1": 0.0}
    assert {str(m): a.mean for m, a in ours.aggregate.items()} == theirs
