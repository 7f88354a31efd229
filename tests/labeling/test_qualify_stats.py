"""The statistics of judge qualification, against known values and simulated judges whose
accuracy, position bias and consistency are known analytically. Every simulation is seeded."""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Mapping
from statistics import NormalDist

import pytest

from tierank.server.labeling.qualify_stats import (
    ListwiseAnswer,
    clustered_proportion,
    judge_verdict,
    listwise_quality,
    pointwise_quality,
    proportion,
)
from tierank.v1 import eval_pb2

# A judge: the documents as shown, their human grades and a random source -> its ordering.
Judge = Callable[[tuple[str, ...], Mapping[str, int], random.Random], tuple[str, ...]]


def noisy_judge(sigma: float) -> Judge:
    """Sorts by grade plus fresh N(0, sigma²) per document per call, as the oracle judge does;
    ties (sigma 0) broken by id, so that a noiseless judge does not follow the shown order."""

    def judge(shown, grades, rng):
        noisy = {d: grades[d] + rng.gauss(0.0, sigma) for d in shown}
        return tuple(sorted(shown, key=lambda d: (-noisy[d], d)))

    return judge


def first_shown_judge(preference: float, sigma: float) -> Judge:
    """Puts the first shown document first with probability `preference`, the rest (or, the
    rest of the time, everything) by noisy grade."""
    by_grade = noisy_judge(sigma)

    def judge(shown, grades, rng):
        if rng.random() < preference:
            return (shown[0], *by_grade(shown[1:], grades, rng))
        return by_grade(shown, grades, rng)

    return judge


def shown_order_judge(shown, grades, rng):
    return shown


def simulate(
    judge: Judge,
    *,
    queries: int = 30,
    batch_size: int = 8,
    batches: int = 2,
    shuffles: int = 3,
    seed: int = 7,
) -> tuple[list[ListwiseAnswer], dict[str, dict[str, int]]]:
    """Each query's documents graded 0..3 in turn, split into `batches` batches, each shown in
    `shuffles` random orders."""
    rng = random.Random(seed)
    grades: dict[str, dict[str, int]] = {}
    answers = []
    for q in range(queries):
        query_id = f"q{q}"
        docs = [f"{query_id}-d{i}" for i in range(batch_size * batches)]
        grades[query_id] = {doc: i % 4 for i, doc in enumerate(docs)}
        for batch_id in range(batches):
            batch = docs[batch_id * batch_size : (batch_id + 1) * batch_size]
            for shuffle in range(shuffles):
                shown = list(batch)
                rng.shuffle(shown)
                ranked = judge(tuple(shown), grades[query_id], rng)
                answers.append(
                    ListwiseAnswer(query_id, batch_id, shuffle, tuple(shown), ranked, False)
                )
    return answers, grades


def answer(shown: str, ranked: str, query: str = "q", batch: int = 0, shuffle: int = 0):
    """A hand-written answer: documents are single letters."""
    return ListwiseAnswer(query, batch, shuffle, tuple(shown), tuple(ranked), not ranked)


def interval(share: eval_pb2.Proportion) -> tuple[float, float]:
    return share.low, share.high


def wilson(share: float, trials: float) -> tuple[float, float]:
    """The 95% Wilson score interval, written out independently of the module's."""
    z = 1.959963984540054
    centre = (share + z * z / (2 * trials)) / (1 + z * z / trials)
    half = (
        z / (1 + z * z / trials) * math.sqrt(share * (1 - share) / trials + z * z / (4 * trials**2))
    )
    return centre - half, centre + half


# --- proportions -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("successes", "total", "low", "high"),
    [
        (8, 10, 0.4902, 0.9433),
        (50, 100, 0.4038, 0.5962),
        (0, 10, 0.0, 0.2775),
        (10, 10, 0.7225, 1.0),
        (1, 1, 0.2065, 1.0),
    ],
)
def test_wilson_interval_matches_known_values(successes, total, low, high):
    share = proportion(successes, total)
    assert share.value == successes / total
    assert (share.count, share.total) == (successes, total)
    assert interval(share) == pytest.approx((low, high), abs=5e-5)


def test_a_proportion_of_no_trials_is_uninformative():
    share = proportion(0, 0)
    assert (share.value, share.low, share.high, share.count, share.total) == (0, 0, 1, 0, 0)


@pytest.mark.parametrize(("successes", "total"), [(-1, 3), (4, 3)])
def test_impossible_counts_are_refused(successes, total):
    with pytest.raises(ValueError):
        proportion(successes, total)


def test_clusters_that_agree_within_widen_the_interval():
    # Same 60 of 120 either way; alike clusters say nothing new about the between-cluster share.
    independent = clustered_proportion([(5, 10)] * 12)
    all_or_nothing = clustered_proportion([(10, 10), (0, 10)] * 6)
    assert interval(independent) == interval(proportion(60, 120))
    assert all_or_nothing.value == 0.5 and (all_or_nothing.count, all_or_nothing.total) == (60, 120)
    # Each cluster of 10 is one trial: design effect 10, times 12/11 for estimating the
    # spread from 12 clusters, leaves 11 effective trials.
    assert interval(all_or_nothing) == pytest.approx(wilson(0.5, 11))


def test_one_cluster_is_taken_as_independent_trials():
    assert interval(clustered_proportion([(8, 10)])) == interval(proportion(8, 10))


# --- listwise: pair accuracy -------------------------------------------------------------


@pytest.mark.parametrize("sigma", [0.7, 1.5])
def test_pair_accuracy_by_gap_matches_gaussian_noise(sigma):
    answers, grades = simulate(noisy_judge(sigma), queries=60)
    quality = listwise_quality(answers, grades, 8)
    assert [g.gap for g in quality.by_gap] == [1, 2, 3]
    for gap in quality.by_gap:
        expected = NormalDist().cdf(gap.gap / (sigma * math.sqrt(2)))
        assert gap.accuracy.low <= expected <= gap.accuracy.high, (gap.gap, expected, gap)
        assert gap.accuracy.high - gap.accuracy.low < 0.06  # enough pairs to mean something
    assert sum(g.accuracy.total for g in quality.by_gap) == quality.pair_accuracy.total
    # Two of each grade in a batch of 8: 24 of its 28 pairs are graded differently.
    assert quality.pair_accuracy.total == 60 * 2 * 3 * 24


def test_partial_rankings_count_only_the_pairs_they_rank():
    grades = {"q": {"a": 3, "b": 2, "c": 0, "d": 1}}
    quality = listwise_quality([answer("abcd", "ca")], grades, 4)
    # c above a is wrong; b and d, unranked, are not taken to lose to either.
    assert (quality.pair_accuracy.count, quality.pair_accuracy.total) == (0, 1)
    assert quality.first_position[2].ranked_first.count == 1  # c was shown third
    assert quality.repeats_shown_order.total == 0  # not a full ranking


def test_failed_calls_and_ungraded_documents_count_nowhere():
    grades = {"q": {"a": 2, "b": 1}}  # x has no human grade
    quality = listwise_quality(
        [answer("abx", "abx"), answer("abx", "", shuffle=1), answer("abx", "xba", shuffle=2)],
        grades,
        3,
    )
    assert (quality.pair_accuracy.count, quality.pair_accuracy.total) == (1, 2)
    assert quality.first_position[0].ranked_first.total == 2
    assert quality.self_consistency.total == 3  # one pair of answered shuffles, three pairs


def test_an_answer_naming_an_unshown_or_repeated_document_is_refused():
    with pytest.raises(ValueError, match="not shown"):
        answer("ab", "ac")
    with pytest.raises(ValueError, match="twice"):
        answer("ab", "aa")
    with pytest.raises(ValueError, match="failed"):
        ListwiseAnswer("q", 0, 0, ("a", "b"), ("a",), True)


# --- listwise: position bias -------------------------------------------------------------


def test_a_first_position_preference_is_reported():
    batch_size = 10
    answers, grades = simulate(first_shown_judge(0.4, 1.0), batch_size=batch_size)
    quality = listwise_quality(answers, grades, batch_size)
    first = quality.first_position[0]
    # Shown first is a random document, which also wins on grade 1 time in 10 otherwise.
    expected = 0.4 + 0.6 / batch_size
    assert first.chance == pytest.approx(0.1)
    assert first.ranked_first.low <= expected <= first.ranked_first.high
    assert first.ranked_first.low > 2 * first.chance
    # The other positions share what is left, none above chance.
    assert all(other.ranked_first.low <= other.chance for other in quality.first_position[1:])
    assert [p.position for p in quality.first_position] == list(range(1, batch_size + 1))
    usable, _, line = judge_verdict(quality)
    assert usable
    assert line.endswith(
        f"; position bias: position 1 ranked first {first.ranked_first.value:.0%} (chance 10%)"
    )


def test_a_judge_whose_first_pick_is_a_position_is_not_usable_whatever_its_pairs():
    """Issue 34: a real small model put the fifth-shown passage first in nearly every answer,
    and its other pairs were good enough for pair accuracy above chance once a re-ask filled
    its partial answers in: it must stay refused."""
    batch_size = 5
    answers, grades = simulate(first_shown_judge(0.95, 0.3), batch_size=batch_size)
    quality = listwise_quality(answers, grades, batch_size)
    assert quality.pair_accuracy.low > 0.5, "its other pairs carry signal"
    assert quality.first_position[0].ranked_first.low > 0.5
    usable, weight, line = judge_verdict(quality)
    assert (usable, weight) == (False, 0.0)
    assert line.startswith("not usable: its answers follow the shown positions (pair accuracy")
    assert "position 1 ranked first" in line


def test_an_unbiased_judge_has_no_position_bias_note():
    answers, grades = simulate(noisy_judge(1.0), batch_size=10)
    quality = listwise_quality(answers, grades, 10)
    assert max(p.ranked_first.value for p in quality.first_position) < 0.2
    assert "position bias" not in judge_verdict(quality)[2]


def test_only_full_batches_count_for_position():
    quality = listwise_quality([answer("abc", "cab"), answer("ab", "ab", batch=1)], {}, 3)
    assert [p.ranked_first.count for p in quality.first_position] == [0, 0, 1]
    assert all(p.ranked_first.total == 1 for p in quality.first_position)


def test_a_judge_that_repeats_the_shown_order_is_at_chance():
    answers, grades = simulate(shown_order_judge, batch_size=10)
    quality = listwise_quality(answers, grades, 10)
    assert quality.repeats_shown_order.value == 1.0
    assert quality.reverses_shown_order.value == 0.0
    assert quality.first_position[0].ranked_first.value == 1.0
    assert quality.pair_accuracy.low <= 0.5 <= quality.pair_accuracy.high
    usable, weight, line = judge_verdict(quality)
    assert (usable, weight) == (False, 0.0)
    # The one line `tierank qualifications` shows says why: at chance, and by following positions.
    assert line.startswith("not usable: pair accuracy") and "is chance; position bias" in line
    assert "repeats the shown order in 100% of answers" in line


def test_a_judge_at_chance_is_rarely_called_usable():
    # The default design (16 queries, 2 batches of 10, 2 shuffles) 200 times over. The pairs
    # of one ordering are correlated; taken as independent trials (plain Wilson) this judge
    # would be called usable 26 times in these 200, not the 5 that a 95% interval allows.
    called_usable = 0
    for seed in range(200):
        answers, grades = simulate(
            shown_order_judge, queries=16, batch_size=10, shuffles=2, seed=seed
        )
        called_usable += judge_verdict(listwise_quality(answers, grades, 10))[0]
    assert called_usable <= 10


def test_reversing_the_shown_order_is_counted():
    quality = listwise_quality([answer("abc", "cba"), answer("abc", "abc", shuffle=1)], {}, 3)
    assert (quality.reverses_shown_order.count, quality.reverses_shown_order.total) == (1, 2)
    assert (quality.repeats_shown_order.count, quality.repeats_shown_order.total) == (1, 2)


# --- listwise: self-consistency and transitivity -----------------------------------------


def test_a_noiseless_judge_is_self_consistent():
    answers, grades = simulate(noisy_judge(0.0))
    consistency = listwise_quality(answers, grades, 8).self_consistency
    # Per batch: 3 pairs of shuffles, 28 document pairs each.
    assert consistency.value == 1.0 and consistency.total == 30 * 2 * 3 * 28


def test_a_noisy_judge_agrees_with_itself_as_often_as_its_noise_allows():
    sigma = 1.0
    answers, grades = simulate(noisy_judge(sigma), queries=60)
    consistency = listwise_quality(answers, grades, 8).self_consistency
    # Two independent calls order a pair alike with p² + (1 − p)², p the chance of the
    # grades' order; a batch of 8 (two of each grade 0..3) has 4 pairs of gap 0, 12 of gap 1,
    # 8 of gap 2 and 4 of gap 3.
    alike = {
        gap: p * p + (1 - p) ** 2
        for gap in range(4)
        for p in [NormalDist().cdf(gap / (sigma * math.sqrt(2)))]
    }
    expected = (4 * alike[0] + 12 * alike[1] + 8 * alike[2] + 4 * alike[3]) / 28
    assert consistency.low <= expected <= consistency.high
    assert consistency.high < 1.0


def test_a_transitive_judge_makes_no_cyclic_triples():
    answers, grades = simulate(noisy_judge(0.0))
    cyclic = listwise_quality(answers, grades, 8).cyclic_triples
    # Every triple of a batch is judged; none across batches (they share no call).
    assert cyclic.count == 0 and cyclic.total == 30 * 2 * math.comb(8, 3)


def test_cyclic_majorities_are_counted_per_query():
    cycle = [answer("ab", "ab"), answer("bc", "bc", batch=1), answer("ca", "ca", batch=2)]
    chain = [answer("xy", "xy", "r"), answer("yz", "yz", "r", 1), answer("xz", "xz", "r", 2)]
    cyclic = listwise_quality(cycle + chain, {}, 2).cyclic_triples
    assert (cyclic.count, cyclic.total) == (1, 2)


def test_a_tied_pair_leaves_its_triples_unjudged():
    # a and b beat each other once: no majority, so the triple a, b, c is not judged.
    answers = [answer("ab", "ab"), answer("ab", "ba", shuffle=1)]
    answers += [answer("bc", "bc", batch=1), answer("ca", "ca", batch=2)]
    cyclic = listwise_quality(answers, {}, 2).cyclic_triples
    assert (cyclic.count, cyclic.total) == (0, 0)


# --- pointwise ---------------------------------------------------------------------------


def test_perfect_pointwise_agreement():
    pairs = [(g, g) for g in (0, 1, 2, 3, 3, 2, 0)]
    quality = pointwise_quality(pairs, threshold=2)
    assert list(quality.confusion.grades) == [0, 1, 2, 3]
    assert [list(r.counts) for r in quality.confusion.rows] == [
        [2, 0, 0, 0],
        [0, 1, 0, 0],
        [0, 0, 2, 0],
        [0, 0, 0, 2],
    ]
    assert quality.linear_weighted_kappa == pytest.approx(1.0)
    assert quality.quadratic_weighted_kappa == pytest.approx(1.0)
    assert (quality.precision.value, quality.recall.value, quality.f1) == (1.0, 1.0, 1.0)
    assert quality.relevance_threshold == 2


def test_confusion_rows_are_human_grades_and_columns_the_judges():
    quality = pointwise_quality([(3, 0), (3, 0), (1, 2)], threshold=2)
    rows = [list(r.counts) for r in quality.confusion.rows]
    assert rows[3][0] == 2 and rows[1][2] == 1 and sum(map(sum, rows)) == 3


def test_a_grade_beyond_the_scale_widens_the_matrix():
    quality = pointwise_quality([(4, 3), (0, 0)], threshold=2)
    assert list(quality.confusion.grades) == [0, 1, 2, 3, 4]
    assert list(quality.confusion.rows[4].counts) == [0, 0, 0, 1, 0]


def test_weighted_kappa_charges_distance_on_the_full_scale():
    # Grade 2 unused: 0 against 3 still costs 3 (not 2, as by rank among the grades used).
    pairs = [(0, 1), (3, 3), (0, 0), (3, 3), (1, 0)]
    quality = pointwise_quality(pairs, threshold=2)
    # Observed linear cost 2/5; chance (2·1 + 2·1 + 3·2·2 + 3·2·2 + 2·1·2 + 2·2·1) / 25 = 36/25.
    assert quality.linear_weighted_kappa == pytest.approx(1 - (2 / 5) / (36 / 25))


def test_a_constant_grader_has_kappa_zero():
    pairs = [(0, 2), (1, 2), (2, 2), (3, 2), (3, 2)]
    quality = pointwise_quality(pairs, threshold=2)
    assert quality.linear_weighted_kappa == pytest.approx(0.0)
    assert quality.quadratic_weighted_kappa == pytest.approx(0.0)
    assert (quality.precision.count, quality.precision.total) == (3, 5)
    assert (quality.recall.count, quality.recall.total) == (3, 3)
    assert quality.f1 == pytest.approx(2 * 3 / (2 * 3 + 2))


def test_kappa_is_unset_when_both_sides_use_one_grade():
    quality = pointwise_quality([(1, 1), (1, 1)], threshold=2)
    assert not quality.HasField("linear_weighted_kappa")
    assert not quality.HasField("quadratic_weighted_kappa")
    # Nothing relevant on either side: precision and recall have no trials, F1 says nothing.
    assert quality.precision.total == quality.recall.total == 0
    assert not quality.HasField("f1")


def test_f1_is_zero_when_the_judge_finds_nothing_the_humans_do():
    quality = pointwise_quality([(3, 0), (2, 1), (0, 0)], threshold=2)
    assert quality.f1 == 0.0 and quality.recall.value == 0.0 and quality.precision.total == 0


def test_no_pointwise_grades():
    quality = pointwise_quality([], threshold=2)
    assert not quality.HasField("linear_weighted_kappa") and not quality.HasField("f1")
    assert [list(r.counts) for r in quality.confusion.rows] == [[0] * 4] * 4


# --- verdict -----------------------------------------------------------------------------


def with_accuracy(successes: int, total: int) -> eval_pb2.ListwiseQuality:
    return eval_pb2.ListwiseQuality(batch_size=10, pair_accuracy=proportion(successes, total))


def test_a_judge_above_chance_is_usable_with_its_log_odds_as_weight():
    usable, weight, line = judge_verdict(with_accuracy(86, 100))
    assert usable
    assert weight == pytest.approx(math.log(0.86 / 0.14))
    assert line == "usable: pair accuracy 0.86 [0.78, 0.91]"


def test_a_perfect_judges_weight_is_clipped():
    usable, weight, _ = judge_verdict(with_accuracy(200, 200))
    assert usable and weight == pytest.approx(math.log(99))


@pytest.mark.parametrize(
    ("successes", "line"),
    [
        (51, "not usable: pair accuracy 0.51 [0.41, 0.61] is chance"),
        (10, "not usable: pair accuracy 0.10 [0.06, 0.17] is below chance"),
    ],
)
def test_a_judge_not_above_chance_is_not_usable(successes, line):
    assert judge_verdict(with_accuracy(successes, 100)) == (False, 0.0, line)


def test_a_judge_without_answers_is_not_usable():
    failed = [answer("abc", "", shuffle=s) for s in range(3)]
    quality = listwise_quality(failed, {"q": {"a": 1, "b": 0, "c": 2}}, 3)
    assert judge_verdict(quality) == (False, 0.0, "not usable: no answers")


def test_answers_without_a_graded_pair_are_not_evidence():
    quality = listwise_quality([answer("ab", "ab")], {"q": {"a": 1, "b": 1}}, 2)
    assert judge_verdict(quality) == (
        False,
        0.0,
        "not usable: no answer ranked two passages graded differently",
    )


def test_a_mild_position_preference_is_not_called_bias():
    quality = with_accuracy(90, 100)
    quality.first_position.add(position=1, ranked_first=proportion(150, 1000), chance=0.1)
    quality.first_position.add(position=2, ranked_first=proportion(85, 1000), chance=0.1)
    assert judge_verdict(quality)[2] == "usable: pair accuracy 0.90 [0.83, 0.94]"
