"""The set-based family of ../shared/METRICS.md, checked against arithmetic done by hand."""

from __future__ import annotations

import pytest

from tierank.evaluation import (
    TREC_DL_SCALE,
    UTILITY_SCALE,
    GradeScale,
    SetParams,
    evaluate,
    parse_measure,
    read_qrels,
    read_run,
    set_scores,
    utility_weights,
)

# The worked example of ../shared/METRICS.md: U grades [5, 4, 4, 3, 3, 3, 2, 1], S_4 grades
# [4, 3, 3, 3].
POOL = {"d5": 5, "a4": 4, "b4": 4, "c3": 3, "d3": 3, "e3": 3, "f2": 2, "g1": 1}
SELECTED = ["a4", "c3", "d3", "e3"]


def test_worked_example_weights():
    # N = 8: p5 = 1/8, p4 = 2/8, p3 = 3/8. With alpha = 1:
    #   r5 = 1.0 / (1/8) = 8;  r4 = 0.5 / (2/8) = 2;  r3 = 0.1 / (3/8) = 0.2667 (= 4/15)
    #   w4 = min(2 / 8, cap4 = 1) = 0.25;  w3 = min((4/15) / 8, cap3 = 0.25) = 1/30 = 0.0333
    weights = utility_weights(list(POOL.values()))
    assert weights == pytest.approx({5: 1.0, 4: 0.25, 3: 1 / 30, 2: 0.0, 1: 0.0})


def test_worked_example_ra_nwg():
    # G_obs(4)    = w4 + 3 * w3 = 0.25 + 3/30 = 0.35
    # G_oracle(4) = the 4 largest weights in U = 1 + 0.25 + 0.25 + 1/30 = 23/15 = 1.5333
    # RA-nWG@4    = 0.35 / (23/15) = 5.25 / 23 = 0.228261
    scores = set_scores(POOL, SELECTED, 4)
    assert scores.ra_nwg == pytest.approx(5.25 / 23)
    assert round(scores.ra_nwg, 6) == 0.228261
    # R4+ = 3, one grade-4 passage selected: 1 / min(4, 3). R5 = 1, none selected: 0 / 1.
    assert scores.n_recall_4plus == pytest.approx(1 / 3)
    assert scores.n_recall_5 == 0.0
    assert scores.precision_4plus == 0.25  # 1 of 4 has grade >= 4
    assert scores.harm == 0.0  # no selected passage has grade <= 2


def test_proc_and_pct_proc_by_hand():
    # The retriever also returned d5, f2 and an unjudged x, but the selection skipped them.
    # G_pool(4) = 1 (d5) + 0.25 (a4) + 1/30 + 1/30 = 79/60; PROC = (79/60) / (23/15) = 79/92.
    # %PROC = RA-nWG / PROC = (0.35 / (23/15)) / ((79/60) / (23/15)) = 0.35 / (79/60) = 21/79.
    retrieved = [*SELECTED, "d5", "f2", "x"]
    scores = set_scores(POOL, SELECTED, 4, retrieved)
    assert scores.proc == pytest.approx(79 / 92)
    assert scores.pct_proc == pytest.approx(21 / 79)
    # Without a retrieval pool P = S_K, so the selection reached its ceiling.
    alone = set_scores(POOL, SELECTED, 4)
    assert alone.proc == pytest.approx(alone.ra_nwg)
    assert alone.pct_proc == pytest.approx(1.0)


def test_alpha_zero_disables_rarity():
    # r_g = b_g: w4 = min(0.5 / 1, 1) = 0.5, w3 = min(0.1 / 1, 0.25) = 0.1.
    weights = utility_weights(list(POOL.values()), SetParams(alpha=0))
    assert weights == pytest.approx({5: 1.0, 4: 0.5, 3: 0.1, 2: 0.0, 1: 0.0})


def test_fallback_when_no_grade_five():
    # n5 = 0: w5 = 1, w4 = 1, w3 = 0.2. S_2 = [4, 3]: G_obs = 1.2; oracle = 1 + 1 = 2 -> 0.6.
    pool = {"a": 4, "b": 4, "c": 3, "d": 2}
    scores = set_scores(pool, ["a", "c"], 2)
    assert scores.ra_nwg == pytest.approx(0.6)
    assert scores.n_recall_5 is None
    assert scores.n_recall_4plus == 0.5  # 1 of min(2, R4+ = 2)


def test_na_when_oracle_gain_is_zero():
    pool = {"a": 2, "b": 1, "c": 1}
    scores = set_scores(pool, ["a", "b"], 2)
    assert (scores.ra_nwg, scores.proc, scores.pct_proc, scores.n_recall_4plus) == (None,) * 4
    assert scores.harm == 1.0  # both selected passages have grade <= 2


def test_unjudged_passages_count_as_harm_unless_neutral():
    pool = {"a": 5}
    assert set_scores(pool, ["a", "x"], 2).harm == 0.5
    assert set_scores(pool, ["a", "x"], 2, unjudged_utility=None).harm == 0.0


def test_scales_map_onto_utilities():
    assert [TREC_DL_SCALE.utility(g) for g in range(4)] == [1, 2, 4, 5]
    with pytest.raises(ValueError, match="grade 7 is not on this scale"):
        TREC_DL_SCALE.utility(7)
    with pytest.raises(ValueError, match=r"1\.\.5"):
        GradeScale({0: 0})


def test_evaluate_with_set_measures_on_the_worked_example():
    run = {"q": {docid: 1.0 - i / 10 for i, docid in enumerate(SELECTED)}}
    result = evaluate(["RA-nWG@4", "RA-nWG(alpha=0)@4"], {"q": POOL}, run, scale=UTILITY_SCALE)
    assert result.per_query[parse_measure("RA-nWG@4")]["q"] == pytest.approx(5.25 / 23)
    # alpha = 0: G_obs = 0.5 + 3 * 0.1 = 0.8; oracle = 1 + 0.5 + 0.5 + 0.1 = 2.1.
    assert result.per_query[parse_measure("RA-nWG(alpha=0)@4")]["q"] == pytest.approx(0.8 / 2.1)


def test_dl19_set_measures_stay_below_their_ceiling(shared_data):
    names = ["RA-nWG@10", "PROC@10", "%PROC@10", "N-Recall4+@10", "Harm@10"]
    result = evaluate(
        names,
        read_qrels(shared_data / "trec-dl/qrels.dl19-passage.txt"),
        read_run(shared_data / "trec-dl/runs/run.rankllm.BM25.dl19.top100.trec"),
    )
    ra, proc, pct = (result.per_query[parse_measure(n)] for n in names[:3])
    for qid, value in ra.items():
        assert 0 <= value <= proc[qid] + 1e-12 <= 1 + 1e-12
        assert pct[qid] == (pytest.approx(value / proc[qid]) if proc[qid] else None)
    # %PROC is NA exactly where the retriever found no evidence at all (PROC = 0).
    missed = sum(1 for v in proc.values() if v == 0)
    assert result.aggregate[parse_measure("%PROC@10")].na == missed
    assert all(0 < a.mean < 1 for a in result.aggregate.values())


def test_negative_parameters_are_rejected():
    with pytest.raises(ValueError, match="must not be negative"):
        SetParams(alpha=-1)
