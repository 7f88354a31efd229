from __future__ import annotations

import math

import pytest

from tierank.evaluation import (
    MeasureError,
    evaluate,
    parse_measure,
    tie_aware_ndcg,
    tiers_from_scores,
)
from tierank.evaluation.trec_measures import ndcg
from tierank.limits import MAX_MEASURE_CUTOFF


@pytest.mark.parametrize(
    ("text", "name", "cutoff", "params"),
    [
        ("nDCG@10", "nDCG", 10, {"ties": 0}),
        ("nDCG", "nDCG", None, {"ties": 0}),
        ("nDCG(ties=1)@5", "nDCG", 5, {"ties": 1}),
        ("RR", "RR", None, {"rel": 1}),
        ("RR(rel=2)@10", "RR", 10, {"rel": 2}),
        ("AP(rel=2)", "AP", None, {"rel": 2}),
        ("R@100", "R", 100, {"rel": 1}),
        ("Judged@10", "Judged", 10, {}),
        ("RA-nWG(alpha=0,cap3=0.5)@5", "RA-nWG", 5, {"alpha": 0.0, "cap4": 1.0, "cap3": 0.5}),
        ("%PROC@10", "%PROC", 10, {"alpha": 1.0, "cap4": 1.0, "cap3": 0.25}),
        ("N-Recall4+@10", "N-Recall4+", 10, {}),
    ],
)
def test_parse_measure(text, name, cutoff, params):
    measure = parse_measure(text)
    assert (measure.name, measure.cutoff, dict(measure.params)) == (name, cutoff, params)


@pytest.mark.parametrize(
    ("text", "canonical"),
    [
        ("RR(rel=1)@10", "RR@10"),
        ("RR(rel=2)@10", "RR(rel=2)@10"),
        ("AP( rel = 3 )", "AP(rel=3)"),
        ("nDCG(ties=0)@10", "nDCG@10"),
        ("nDCG(ties=1)@10", "nDCG(ties=1)@10"),
    ],
)
def test_canonical_text_drops_defaults(text, canonical):
    assert str(parse_measure(text)) == canonical
    assert parse_measure(canonical) == parse_measure(text)


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("MRR@10", "unknown measure 'MRR'"),
        ("nDCG@0", "must be positive"),
        ("P@-3", "must be positive"),
        ("nDCG@99999999999", "must be at most 10000"),
        ("P@10001", "must be at most 10000"),
        ("P@1.5", "must be an integer"),
        ("P", "needs a cutoff"),
        ("Rprec@10", "takes no cutoff"),
        ("nDCG(rel=2)@10", "bad parameter"),
        ("RR(rel=high)", "must be int"),
        ("RR(rel)", "bad parameter"),
    ],
)
def test_bad_measures_raise(text, problem):
    with pytest.raises(MeasureError, match=problem):
        parse_measure(text)


def test_the_deepest_cutoff_is_the_limits_module_s():
    assert parse_measure(f"P@{MAX_MEASURE_CUTOFF}").cutoff == MAX_MEASURE_CUTOFF


def test_na_is_explicit_and_counted():
    qrels = {"q1": {"a": 1}, "q2": {"b": 0}}
    run = {"q1": {"a": 1.0}, "q2": {"b": 1.0}}
    result = evaluate(["AP", "P@1"], qrels, run)
    ap, p1 = parse_measure("AP"), parse_measure("P@1")
    assert result.per_query[ap] == {"q1": 1.0, "q2": None}
    assert (result.aggregate[ap].mean, result.aggregate[ap].count, result.aggregate[ap].na) == (
        1.0,
        1,
        1,
    )
    assert result.aggregate[p1].mean == 0.5
    zeroed = evaluate(["AP"], qrels, run, na_as_zero=True)
    assert zeroed.aggregate[ap].mean == 0.5
    assert zeroed.aggregate[ap].na == 0


def test_all_queries_scores_missing_queries_as_empty_rankings():
    qrels = {"q1": {"a": 1}, "q2": {"b": 2}}
    run = {"q1": {"a": 1.0}, "q3": {"x": 1.0}}
    measure = parse_measure("RR")
    assert evaluate([measure], qrels, run).per_query[measure] == {"q1": 1.0}
    everything = evaluate([measure], qrels, run, all_queries=True)
    assert everything.per_query[measure] == {"q1": 1.0, "q2": 0.0}


def _dcg(gains):
    return sum(g / math.log2(i + 2) for i, g in enumerate(gains))


def test_tie_aware_ndcg_equals_the_mean_over_orders():
    judgments = {"a": 3, "b": 0, "c": 1, "d": 2}
    tiers = [{"b", "a"}, {"c", "d"}]
    # Orders within tiers: (a,b | b,a) x (c,d | d,c); each position gets its tier's mean gain.
    orders = [
        ["a", "b", "c", "d"],
        ["b", "a", "c", "d"],
        ["a", "b", "d", "c"],
        ["b", "a", "d", "c"],
    ]
    for cutoff in (None, 1, 3):
        mean = sum(ndcg(order, judgments, cutoff) for order in orders) / 4
        assert tie_aware_ndcg(tiers, judgments, cutoff) == pytest.approx(mean)
    # By hand at cutoff 1: mean gain of tier {a, b} is 1.5, ideal DCG@1 is 3 -> 0.5.
    assert tie_aware_ndcg(tiers, judgments, 1) == pytest.approx(0.5)


def test_tie_aware_ndcg_by_name_averages_tied_scores_in_a_run():
    judgments = {"a": 3, "b": 0, "c": 1, "d": 2}
    run = {"q": {"a": 2.0, "b": 2.0, "c": 1.0, "d": 1.0}}
    result = evaluate(["nDCG@3", "nDCG(ties=1)@3"], {"q": judgments}, run)
    plain, tie_aware = (
        result.per_query[parse_measure(m)]["q"] for m in ("nDCG@3", "nDCG(ties=1)@3")
    )
    orders = [["a", "b", "c"], ["b", "a", "c"], ["a", "b", "d"], ["b", "a", "d"]]
    assert tie_aware == pytest.approx(sum(ndcg(o, judgments, 3) for o in orders) / 4)
    # trec_eval's rule orders ties by docid descending (b before a, d before c).
    assert plain == pytest.approx(ndcg(["b", "a", "d"], judgments, 3))
    assert tie_aware != pytest.approx(plain)


def test_tie_aware_ndcg_matches_plain_ndcg_without_ties():
    judgments = {"a": 1, "b": 2, "c": 0}
    scores = {"a": 0.9, "b": 0.5, "c": 0.1}
    assert tie_aware_ndcg(tiers_from_scores(scores), judgments) == pytest.approx(
        ndcg(["a", "b", "c"], judgments)
    )
    assert tie_aware_ndcg([{"a"}], {"a": 0}) is None


def test_ndcg_by_hand():
    # Ranking gains [0, 2, 1]; ideal [2, 1]. DCG = 2/log2(3) + 1/2; IDCG = 2 + 1/log2(3).
    value = ndcg(["c", "b", "a"], {"a": 1, "b": 2, "c": 0})
    assert value == pytest.approx((2 / math.log2(3) + 0.5) / (2 + 1 / math.log2(3)))


def test_tiers_from_scores_groups_equal_scores():
    assert tiers_from_scores({"a": 1.0, "b": 2.0, "c": 1.0, "d": 0.0}) == [{"b"}, {"a", "c"}, {"d"}]
