from __future__ import annotations

import pytest

from tierank.evaluation import anchor_tier_grades, labels_from_grade_levels, labels_from_rank_bands


def _tiers(sizes):
    counter = iter(range(sum(sizes)))
    return [[f"d{next(counter)}" for _ in range(size)] for size in sizes]


def test_rank_bands_use_the_tiers_first_position_by_default():
    # Positions: tier0 1–8, tier1 9–12, tier2 13–40, tier3 41.
    tiers = _tiers([8, 4, 28, 1])
    labels = labels_from_rank_bands(tiers, bands=[(10, 3), (30, 2)], below=0)
    assert [labels[t[0]] for t in tiers] == [3, 3, 2, 0]
    # Mean positions: 4.5, 10.5, 26.5, 41.
    by_mean = labels_from_rank_bands(tiers, bands=[(10, 3), (30, 2)], position="mean")
    assert [by_mean[t[0]] for t in tiers] == [3, 2, 2, 0]
    assert len(labels) == 41


def test_rank_bands_must_increase():
    with pytest.raises(ValueError, match="increasing"):
        labels_from_rank_bands([["a"]], bands=[(30, 2), (10, 3)])


def test_grade_levels_split_tiers_evenly():
    tiers = _tiers([1] * 8)
    labels = labels_from_grade_levels(tiers, levels=4)
    assert [labels[t[0]] for t in tiers] == [3, 3, 2, 2, 1, 1, 0, 0]
    three = labels_from_grade_levels(_tiers([2, 1, 1]), levels=3, lowest=1)
    assert sorted(three.values(), reverse=True) == [3, 3, 2, 1]


def _counting(truth):
    calls = []

    def grade_of(index):
        calls.append(index)
        return truth[index]

    return grade_of, calls


def test_anchoring_recovers_monotone_grades_with_few_calls():
    truth = [3] * 5 + [2] * 20 + [1] * 30 + [0] * 45
    grade_of, calls = _counting(truth)
    result = anchor_tier_grades(len(truth), grade_of)
    assert list(result.grades) == truth
    assert result.calls == len(calls) == len(set(calls))
    # Three boundaries in 100 tiers: far fewer calls than one per tier (about 3 · log2 100).
    assert result.calls <= 25
    assert result.non_monotone == 0
    assert result.anchors == {i: truth[i] for i in calls}


def test_anchoring_a_constant_grade_takes_two_calls():
    grade_of, _ = _counting([2] * 50)
    result = anchor_tier_grades(50, grade_of)
    assert (result.grades, result.calls) == ((2,) * 50, 2)
    assert anchor_tier_grades(0, grade_of).grades == ()
    assert anchor_tier_grades(1, grade_of).calls == 1


def test_anchoring_clamps_answers_that_break_the_order():
    # Tier 2 is judged 3 although the last tier is 0 and the first 1: clamped to 1.
    truth = [1, 1, 3, 0, 0]
    grade_of, _ = _counting(truth)
    result = anchor_tier_grades(len(truth), grade_of)
    assert list(result.grades) == sorted(result.grades, reverse=True)
    assert result.non_monotone == 1
    assert result.anchors[2] == 3
