"""A study's results: by hand on three systems, and on DL19's six runs against trec_eval."""

from __future__ import annotations

import math

import ir_measures
import pytest

from tierank.evaluation import (
    Interval,
    StudyTally,
    compare_systems,
    evaluate,
    rank_biased_overlap,
    read_qrels,
    read_run,
    study_results,
)

LABELS = {"q1": {"d1": 2, "d2": 0, "d3": 1}, "q2": {"e1": 1}}
# The human disagrees on q1: d2, not d1, is the relevant one. q9 is no query of the study.
HUMAN = {"q1": {"d1": 0, "d2": 3}, "q2": {"e1": 1}, "q9": {"z": 1}}
RUNS = {
    "a": {"q1": {"d1": 3.0, "d2": 2.0, "d3": 1.0}, "q2": {"e1": 1.0}},
    "b": {"q1": {"d2": 3.0, "d1": 2.0}, "q2": {"e1": 1.0}},
    "c": {"q1": {"d3": 1.0}},  # nothing for q2: an empty ranking there
}
MEASURES = ["nDCG@10", "P@1", "AP(rel=2)"]


def test_systems_measures_and_per_query_by_hand():
    results = study_results(LABELS, RUNS, MEASURES, samples=500)
    assert results.primary_measure == "nDCG@10"
    assert results.measures == MEASURES
    assert results.confidence == 0.95
    assert results.agreement is None
    # nDCG@10 on q1: a has d1 (2) and d3 (1) at ranks 1 and 3, b has d1 at 2, c d3 at 1; all of
    # a and b get q2's only relevant document first, c nothing.
    assert results.ranking == ["a", "b", "c"]
    assert [s.name for s in results.systems] == results.ranking
    assert results.per_query["q2"]["c"] == {"nDCG@10": 0.0, "P@1": 0.0, "AP(rel=2)": None}
    assert results.per_query["q1"]["b"]["AP(rel=2)"] == 0.5  # d1, the one grade 2, at rank 2
    assert {s.name: s.queries for s in results.systems} == {"a": 2, "b": 2, "c": 2}
    by_name = {s.name: s for s in results.systems}
    # AP(rel=2) is NA on q2 (no grade 2 there): one value, a point interval.
    assert by_name["b"].measures["AP(rel=2)"] == Interval(0.5, 0.5, 0.5)
    assert by_name["a"].measures["P@1"] == Interval(1.0, 1.0, 1.0)
    expected = evaluate(MEASURES, LABELS, RUNS["c"], all_queries=True)
    for measure, values in expected.per_query.items():
        for qid, value in values.items():
            assert results.per_query[qid]["c"][str(measure)] == value


def test_primary_measure_comparisons_are_compare_systems():
    results = study_results(LABELS, RUNS, MEASURES, samples=500, seed=3)
    primary = {
        system: {qid: results.per_query[qid][system]["nDCG@10"] for qid in LABELS}
        for system in RUNS
    }
    direct = compare_systems(primary, samples=500, seed=3)
    assert results.comparisons == direct.adjacent
    assert {s.name: s.measures["nDCG@10"] for s in results.systems} == direct.intervals
    assert [(c.better, c.worse) for c in results.comparisons] == [("a", "b"), ("b", "c")]


def test_agreement_with_human_qrels_by_hand():
    agreement = study_results(LABELS, RUNS, MEASURES, human=HUMAN, samples=500).agreement
    assert agreement is not None
    # Pairs (study, human): q1/d1 (2, 0), q1/d2 (0, 3), q2/e1 (1, 1); grades 0 to 3.
    assert agreement.pairs == 3
    assert agreement.confusion.categories == (0, 1, 2, 3)
    assert agreement.confusion.counts == ((0, 0, 0, 1), (0, 1, 0, 0), (1, 0, 0, 0), (0, 0, 0, 0))
    # Observed agreement 1/3; chance (1·1 + 1·1) / 9 = 2/9: κ = (1/3 − 2/9) / (7/9) = 1/7.
    assert agreement.kappa == pytest.approx(1 / 7)
    # Linear: observed cost (2 + 3 + 0) / 3 = 5/3, chance Σ|i−j| r_i c_j / 9 = 11/9: 1 − 15/11.
    assert agreement.weighted_kappa == pytest.approx(-4 / 11)
    # Under the human, b (d2 first on q1) beats a; c stays last (q9 is not scored).
    assert agreement.human_ranking == ["b", "a", "c"]
    assert agreement.human_measures["b"] == {"nDCG@10": 1.0, "P@1": 1.0, "AP(rel=2)": 1.0}
    assert agreement.human_measures["a"]["P@1"] == 0.5
    # Study a > b > c, human b > a > c: one discordant pair of three, τ = (2 − 1) / 3.
    assert agreement.kendall_tau == pytest.approx(1 / 3)
    assert agreement.rbo == rank_biased_overlap(["a", "b", "c"], ["b", "a", "c"]).value


def test_no_shared_pairs_or_queries():
    agreement = study_results(LABELS, RUNS, MEASURES, human={"q9": {"z": 1}}, samples=100).agreement
    assert agreement is not None
    assert (agreement.pairs, agreement.kappa, agreement.confusion.counts) == (0, None, ())
    assert agreement.human_ranking == ["a", "b", "c"]  # no means: by name
    assert agreement.kendall_tau is None


def test_measures_keep_their_names_and_must_include_the_primary():
    results = study_results(LABELS, RUNS, ["P(rel=1)@1", "AP"], primary="P@1", samples=100)
    assert results.primary_measure == "P(rel=1)@1"
    assert set(results.systems[0].measures) == {"P(rel=1)@1", "AP"}
    with pytest.raises(ValueError, match="not among the measures"):
        study_results(LABELS, RUNS, ["P@1"], samples=100)
    with pytest.raises(ValueError, match="twice"):
        study_results(LABELS, RUNS, ["nDCG@10", "nDCG(ties=0)@10"], samples=100)


def test_a_tally_fed_query_by_query_in_any_order_is_study_results():
    whole = study_results(LABELS, RUNS, MEASURES, human=HUMAN, samples=500)
    tally = StudyTally(MEASURES, systems=list(RUNS), with_human=True)
    for qid in reversed(sorted(LABELS)):
        runs = {system: run[qid] for system, run in RUNS.items() if qid in run}
        tally.add(qid, LABELS[qid], runs, HUMAN.get(qid))
    assert tally.results(samples=500) == whole


def test_predictions_average_each_measure_but_ndcg_by_its_ideal():
    # Two label sets for q1, ranked d1 then d2: one where d1 is a 3 (nDCG@10 1, ideal DCG 3),
    # one where d2 is a 1 (nDCG@10 1/log2(3), ideal 1). nDCG's prediction is the mean DCG
    # over the mean ideal, (3 + 1/log2 3) / 4, not the mean of the two ratios; P@1's is the
    # mean, 0.5. q2, the sample's query, predicts 1 for both.
    tally = StudyTally(["nDCG@10", "P@1"], systems=["a"])
    rich, poor = {"d1": 3, "d2": 0}, {"d1": 0, "d2": 1}
    tally.add("q1", rich, {"a": {"d1": 2.0, "d2": 1.0}}, predictions=[rich, poor])
    tally.add("q2", {"e1": 1}, {"a": {"e1": 1.0}}, sample={"e1": 1}, sample_grades={"e1": 1})
    means = tally.results().study_means["a"]
    discounted = 1 / math.log2(3)
    assert means["nDCG@10"] == pytest.approx(((3 + discounted) / 4 + 1) / 2)
    assert means["nDCG@10"] != pytest.approx(((1 + discounted) / 2 + 1) / 2)
    assert means["P@1"] == pytest.approx((0.5 + 1) / 2)


# ---- DL19: six runs against the human qrels ----------------------------------------------------

DL19_MEASURES = ["nDCG@10", "AP(rel=2)", "RR(rel=2)"]


@pytest.fixture(scope="module")
def dl19(shared_data):
    trec_dl = shared_data / "trec-dl"
    qrels = read_qrels(trec_dl / "qrels.dl19-passage.txt")
    runs = {path.name.split(".")[2]: read_run(path) for path in (trec_dl / "runs").glob("*.trec")}
    assert len(runs) == 6
    return qrels, runs


@pytest.fixture(scope="module")
def dl19_results(dl19):
    qrels, runs = dl19
    return study_results(qrels, runs, DL19_MEASURES, human=qrels, samples=1000)


def test_dl19_human_qrels_agree_with_themselves(dl19, dl19_results):
    qrels, _ = dl19
    agreement = dl19_results.agreement
    assert agreement.pairs == sum(map(len, qrels.values()))
    assert agreement.kappa == agreement.weighted_kappa == 1.0
    assert agreement.kendall_tau == 1.0
    assert agreement.rbo == pytest.approx(1.0)
    assert agreement.human_ranking == dl19_results.ranking
    for system in dl19_results.systems:
        means = {name: interval.mean for name, interval in system.measures.items()}
        assert agreement.human_measures[system.name] == means
        assert system.queries == len(qrels)


def test_dl19_bm25_matches_trec_eval(shared_data, dl19_results, trec_eval_output):
    reference = shared_data / "trec_eval-ref"
    expected = {
        **trec_eval_output(reference / "dl19.bm25top100.ndcg.q.txt"),
        **trec_eval_output(reference / "dl19.bm25top100.l2.q.txt", rel=2),
    }
    bm25 = next(s for s in dl19_results.systems if s.name == "BM25")
    for measure in DL19_MEASURES:
        # trec_eval prints four decimals; -c averages over all 43 queries, as here.
        assert f"{bm25.measures[measure].mean:.4f}" == expected[measure]["all"], measure
        for qid, by_system in dl19_results.per_query.items():
            assert f"{by_system['BM25'][measure]:.4f}" == expected[measure][qid], (measure, qid)


def test_dl19_ranking_by_ndcg_at_10_is_trec_evals(dl19, dl19_results):
    """The reference files cover BM25 only; for all six, pytrec_eval (trec_eval's own C code,
    through ir-measures) gives the means to rank by."""
    qrels, runs = dl19
    measure = ir_measures.parse_measure("nDCG@10")
    means = {
        name: ir_measures.calc_aggregate([measure], qrels, run)[measure]
        for name, run in runs.items()
    }
    assert dl19_results.ranking == sorted(means, key=means.get, reverse=True)
    assert dl19_results.ranking[-1] == "BM25"
    for system in dl19_results.systems:
        assert system.measures["nDCG@10"].mean == pytest.approx(means[system.name], abs=1e-12)
        interval = system.measures["nDCG@10"]
        assert interval.low < interval.mean < interval.high
