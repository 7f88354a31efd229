"""Parity with trec_eval: its own regression fixtures and its outputs on DL19 BM25 top-100.

Each expected value is compared as trec_eval prints it (4 decimals), per query and for 'all'.
"""

from __future__ import annotations

import pytest

from tierank.evaluation import evaluate, read_qrels, read_run

# (qrels, run, expected output, evaluate() options, relevance level) from the fixtures' README.
FIXTURE_CASES = [
    ("qrels.test", "results.test", "out.test", {}, 1),
    ("qrels.test.with-comments", "results.test", "out.test", {}, 1),
    ("qrels.comment.test", "results.comment.test", "out.comment.test", {}, 1),
    ("qrels.test", "results.test", "out.test.a", {}, 1),
    ("qrels.test", "results.test", "out.test.aq", {}, 1),
    ("qrels.test", "results.trunc", "out.test.aqc", {"all_queries": True}, 1),
    ("qrels.test", "results.trunc", "out.test.aqcM", {"all_queries": True, "max_docs": 100}, 1),
    ("qrels.rel_level", "results.test", "out.test.aql", {}, 2),
    ("qrels.test", "results.test", "out.test.meas_params", {}, 1),
]

# From ../shared/data/trec_eval-ref/COMMANDS.txt: all are run with -c on the BM25 top-100 run.
REFERENCE_CASES = [
    ("dl19.bm25top100.ndcg.q.txt", 1),
    ("dl19.bm25top100.l2.q.txt", 2),
    ("dl19.bm25top100.l1.q.txt", 1),
    ("dl19.bm25top100.all_trec.txt", 1),
]


def _mismatches(expected, evaluation):
    by_name = {str(m): m for m in evaluation.per_query}
    wrong = []
    for name, values in expected.items():
        measure = by_name[name]
        for qid, text in values.items():
            if qid == "all":
                got = evaluation.aggregate[measure].mean
            else:
                got = evaluation.per_query[measure][qid]
            if f"{got:.4f}" != text:
                wrong.append((name, qid, text, got))
    return wrong


@pytest.mark.parametrize(("qrels", "run", "output", "options", "rel"), FIXTURE_CASES)
def test_trec_eval_fixtures(shared_data, trec_eval_output, qrels, run, output, options, rel):
    folder = shared_data / "trec_eval-test"
    expected = trec_eval_output(folder / output, rel)
    assert len(expected) >= 10
    evaluation = evaluate(
        list(expected),
        read_qrels(folder / qrels),
        read_run(folder / run),
        na_as_zero=True,
        **options,
    )
    assert _mismatches(expected, evaluation) == []


@pytest.mark.parametrize(("output", "rel"), REFERENCE_CASES)
def test_dl19_trec_eval_reference(shared_data, trec_eval_output, output, rel):
    expected = trec_eval_output(shared_data / "trec_eval-ref" / output, rel)
    assert expected
    evaluation = evaluate(
        list(expected),
        read_qrels(shared_data / "trec-dl" / "qrels.dl19-passage.txt"),
        read_run(shared_data / "trec-dl" / "runs" / "run.rankllm.BM25.dl19.top100.trec"),
        all_queries=True,
        na_as_zero=True,
    )
    assert _mismatches(expected, evaluation) == []


def test_dl19_headline_values(shared_data):
    """The reference figures quoted in the data README."""
    evaluation = evaluate(
        ["nDCG@10", "AP(rel=2)", "RR(rel=2)", "R(rel=2)@100"],
        read_qrels(shared_data / "trec-dl" / "qrels.dl19-passage.txt"),
        read_run(shared_data / "trec-dl" / "runs" / "run.rankllm.BM25.dl19.top100.trec"),
    )
    means = {str(m): round(a.mean, 4) for m, a in evaluation.aggregate.items()}
    assert means == {
        "nDCG@10": 0.5058,
        "AP(rel=2)": 0.2476,
        "RR(rel=2)": 0.7036,
        "R(rel=2)@100": 0.4910,
    }


def test_fixtures_would_catch_the_wrong_tie_rule(shared_data, trec_eval_output, monkeypatch):
    """Ties broken by ascending docid miss trec_eval's -c output: the fixtures check the rule."""
    import tierank.evaluation.scoring as scoring

    monkeypatch.setattr(
        scoring,
        "rank_documents",
        lambda scores: sorted(scores, key=lambda d: (-scores[d], d)),
    )
    folder = shared_data / "trec_eval-test"
    expected = trec_eval_output(folder / "out.test.aqc")
    evaluation = evaluate(
        list(expected),
        read_qrels(folder / "qrels.test"),
        read_run(folder / "results.trunc"),
        all_queries=True,
        na_as_zero=True,
    )
    assert {name for name, *_ in _mismatches(expected, evaluation)} >= {"nDCG", "nDCG@100"}
