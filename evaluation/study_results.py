"""A study's results: systems scored against its labels, compared, and checked against humans.

The fields are named as in the study report (``tierank.study.report/1``): ``systems[].measures``,
``ranking``, ``comparisons``, ``pairs``, ``per_query[].measures``, ``agreement`` and ``sample``.

Without a human sample the intervals are the bootstrap's over the queries, the labels taken as
fixed (``interval_method`` "bootstrap"). With one (some queries labelled by a person), each
mean and each paired difference is prediction-powered (:mod:`.prediction_powered`): the
study's estimate corrected by the human-minus-study difference on the sample's queries, whose
interval includes the judge's error ("ppi").
"""

from __future__ import annotations

from array import array
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from itertools import pairwise

from tierank.evaluation.agreement import ConfusionMatrix, cohen_kappa, confusion_matrix
from tierank.evaluation.comparison import (
    Interval,
    PairComparison,
    PairedTest,
    compare_systems,
    holm_adjusted,
    mean_over_queries,
    rank_by_mean,
    system_intervals,
)
from tierank.evaluation.correlation import kendall_tau_b, rank_biased_overlap
from tierank.evaluation.formats import Qrels, Run
from tierank.evaluation.measures import Measure, parse_measure
from tierank.evaluation.prediction_powered import (
    PredictionPowered,
    pooled_weight,
    prediction_powered_mean,
)
from tierank.evaluation.scoring import evaluate
from tierank.evaluation.set_measures import TREC_DL_SCALE, GradeScale
from tierank.evaluation.trec_measures import ideal_dcg

# Persistence of the rank-biased overlap of system orderings: its top 10 carry 86% of its weight,
# about the number of systems a study compares.
RBO_PERSISTENCE = 0.9


@dataclass(frozen=True)
class SystemResults:
    """One system: ``queries`` with a value for the primary measure, and each measure's mean
    and bootstrap interval (measure name as given -> interval)."""

    name: str
    queries: int
    measures: dict[str, Interval]


@dataclass(frozen=True)
class Agreement:
    """The study's labels against human qrels.

    ``pairs``: the (query, document) pairs both grade; ``kappa`` and ``weighted_kappa`` (linear)
    and ``confusion`` (rows: study labels, columns: human) are over those pairs, the categories
    being every grade from the lowest to the highest either gave, so that linear weights are
    grade differences. ``kendall_tau`` (τ-b of the systems' primary-measure means) and ``rbo``
    (extrapolated, persistence :data:`RBO_PERSISTENCE`) compare the study's ranking with
    ``human_ranking``; ``human_measures`` are each system's means under the human qrels.
    """

    pairs: int
    kappa: float | None
    weighted_kappa: float | None
    confusion: ConfusionMatrix
    kendall_tau: float | None
    rbo: float
    human_ranking: list[str]
    human_measures: dict[str, dict[str, float | None]]


@dataclass(frozen=True)
class SampleAgreement:
    """The study's own labels against a human sample, on the sample's queries: ``queries``
    sample queries, ``pairs`` documents both grade, Cohen's κ (unweighted and linear), the
    ``confusion`` (rows: study, columns: human) and per human grade its count and the share
    the study labelled the same."""

    queries: int
    pairs: int
    kappa: float | None
    weighted_kappa: float | None
    confusion: ConfusionMatrix
    grades: dict[int, tuple[int, float | None]]


@dataclass(frozen=True)
class StudyResults:
    """Systems (in ``ranking`` order), the ranking by the primary measure, the tests of every
    pair of it (``pairs``, Holm-adjusted) and of its neighbours (``comparisons``), every value
    per query (query id -> system -> measure -> value, None for NA) and, given human qrels,
    the agreement with them; given a human sample, the agreement on its queries, and
    ``interval_method`` "ppi" rather than "bootstrap"."""

    primary_measure: str
    measures: list[str]
    confidence: float
    systems: list[SystemResults]
    ranking: list[str]
    comparisons: list[PairComparison]
    per_query: dict[str, dict[str, dict[str, float | None]]]
    agreement: Agreement | None
    pairs: list[PairComparison] = field(default_factory=list)
    interval_method: str = "bootstrap"
    sample: SampleAgreement | None = None
    # PPI only: each system's mean of the study's predictions, before the correction.
    study_means: dict[str, dict[str, float | None]] = field(default_factory=dict)


def study_results(
    labels: Qrels,
    runs: Mapping[str, Run],
    measures: Sequence[str],
    *,
    primary: str = "nDCG@10",
    human: Qrels | None = None,
    confidence: float = 0.95,
    alpha: float = 0.05,
    samples: int = 10_000,
    seed: int = 0,
    scale: GradeScale = TREC_DL_SCALE,
) -> StudyResults:
    """Score each run (system name -> run) on the queries of ``labels`` and compare the systems.

    A query a system retrieved nothing for counts as an empty ranking (trec_eval ``-c``).
    Measures keep the names given; ``primary`` must denote one of them. Every measure's
    intervals are drawn with ``seed`` (measures NA on the same queries resample alike). With
    ``human``, the systems are also scored on the human qrels of the study's queries (those the
    human qrels judge), and the two rankings and label sets compared (:class:`Agreement`).
    ``scale`` maps grades for the set-based measures (RA-nWG, ...). The same as adding each
    query to a :class:`StudyTally`.
    """
    tally = StudyTally(
        measures, systems=list(runs), primary=primary, with_human=human is not None, scale=scale
    )
    for qid in sorted(labels):
        query_runs = {system: run.get(qid, {}) for system, run in runs.items()}
        tally.add(qid, labels[qid], query_runs, human.get(qid) if human is not None else None)
    return tally.results(confidence=confidence, alpha=alpha, samples=samples, seed=seed)


class StudyTally:
    """A study's results built one query at a time, holding only each query's values (and, with
    human qrels, the pairs' two grades), never the runs or the label sets: what
    :func:`study_results` computes, for a study too large to hold those whole."""

    def __init__(
        self,
        measures: Sequence[str],
        *,
        systems: Sequence[str],
        primary: str = "nDCG@10",
        with_human: bool = False,
        scale: GradeScale = TREC_DL_SCALE,
    ) -> None:
        self._parsed = _parse_measures(measures)
        self._primary = _name_of(parse_measure(primary), self._parsed)
        self._systems = list(systems)
        self._scale = scale
        self._with_human = with_human
        # system -> measure name -> query id -> value; the same under the human qrels.
        self._values: dict[str, dict[str, dict[str, float | None]]] = {
            system: {name: {} for name in self._parsed} for system in self._systems
        }
        self._human_values: dict[str, dict[str, dict[str, float | None]]] = {
            system: {name: {} for name in self._parsed} for system in self._systems
        }
        # Under the human sample's labels, for its queries only; and the study's predictions
        # of a person's values, for every query (what prediction-powered intervals correct).
        self._sample_values: dict[str, dict[str, dict[str, float | None]]] = {
            system: {name: {} for name in self._parsed} for system in self._systems
        }
        self._predicted: dict[str, dict[str, dict[str, float | None]]] = {
            system: {name: {} for name in self._parsed} for system in self._systems
        }
        # The grades of the (query, document) pairs both label: ours, theirs (small ints);
        # the same against the human sample.
        self._ours = array("h")
        self._theirs = array("h")
        self._sample_ours = array("h")
        self._sample_theirs = array("h")
        self._sample_queries = 0
        self._queries: list[str] = []

    def add(
        self,
        qid: str,
        labels: Mapping[str, int],
        runs: Mapping[str, Mapping[str, float]],
        human: Mapping[str, int] | None = None,
        sample: Mapping[str, int] | None = None,
        sample_grades: Mapping[str, int] | None = None,
        predictions: Sequence[Mapping[str, int]] | None = None,
    ) -> None:
        """One query: its labels (for a query of the human sample, the study's own, made
        without its human grades), each system's scored documents for it (a system missing
        retrieved nothing), its human grades (None: the human qrels do not judge it) and, for
        a query of the human sample, the labels it is reported with (`sample`: the person's
        grades, and the study's where they gave none) and the person's grades alone
        (`sample_grades`). `predictions`: label sets whose measures predict a person's
        (:meth:`_predict`), for prediction-powered intervals (the labels alone without
        them)."""
        self._queries.append(qid)
        for system in self._systems:
            run = {qid: runs.get(system, {})}
            self._score(self._values[system], labels, qid, run)
            self._predict(self._predicted[system], predictions or [labels], qid, run)
            if human is not None:
                self._score(self._human_values[system], human, qid, run)
            if sample is not None:
                self._score(self._sample_values[system], sample, qid, run)
        if human is not None:
            for docid in sorted(labels):
                if docid in human:
                    self._ours.append(labels[docid])
                    self._theirs.append(human[docid])
        if sample_grades is not None:
            self._sample_queries += 1
            for docid in sorted(labels):
                if docid in sample_grades:
                    self._sample_ours.append(labels[docid])
                    self._sample_theirs.append(sample_grades[docid])

    def _score(
        self,
        into: dict[str, dict[str, float | None]],
        labels: Mapping[str, int],
        qid: str,
        run: Mapping[str, Mapping[str, float]],
    ) -> None:
        values = _values_by_name(self._parsed, {qid: labels}, run, self._scale)
        for name, by_query in values.items():
            into[name][qid] = by_query[qid]

    def _predict(
        self,
        into: dict[str, dict[str, float | None]],
        label_sets: Sequence[Mapping[str, int]],
        qid: str,
        run: Mapping[str, Mapping[str, float]],
    ) -> None:
        """Each measure's mean over the label sets (those where it is defined), or None; for
        nDCG the mean DCG over the mean ideal DCG (each set's value weighted by its ideal).

        Why nDCG differs: a person's nDCG is one ratio, and the mean of the sets' ratios
        depends on how the grades of a query's documents vary together, which the comonotone
        sets only caricature (every document at the same quantile at once); the means of DCG
        and ideal DCG are sums of each document's expected gain, which the posterior gives
        document by document. The ratio of means is nDCG under those expected gains."""
        totals: dict[str, list[float]] = {name: [0.0, 0.0] for name in self._parsed}
        for labels in label_sets:
            values = _values_by_name(self._parsed, {qid: labels}, run, self._scale)
            for name, by_query in values.items():
                if (value := by_query[qid]) is not None:
                    measure = self._parsed[name]
                    weight = ideal_dcg(labels, measure.cutoff) if measure.name == "nDCG" else 1.0
                    totals[name][0] += weight * value
                    totals[name][1] += weight
        for name, (weighted, weights) in totals.items():
            into[name][qid] = weighted / weights if weights > 0 else None

    def results(
        self,
        *,
        confidence: float = 0.95,
        alpha: float = 0.05,
        samples: int = 10_000,
        seed: int = 0,
    ) -> StudyResults:
        if self._sample_queries:
            return self._prediction_powered(confidence, alpha)
        values, parsed, primary_name = self._values, self._parsed, self._primary
        comparison = compare_systems(
            {system: by_measure[primary_name] for system, by_measure in values.items()},
            confidence=confidence,
            alpha=alpha,
            samples=samples,
            seed=seed,
        )
        intervals = {primary_name: comparison.intervals}
        for name in parsed:
            if name != primary_name:
                intervals[name] = system_intervals(
                    {system: by_measure[name] for system, by_measure in values.items()},
                    confidence=confidence,
                    samples=samples,
                    seed=seed,
                )
        agreement = None
        if self._with_human:
            study_means = {system: i.mean for system, i in comparison.intervals.items()}
            agreement = self._agreement(study_means, comparison.ranking)
        return StudyResults(
            primary_name,
            list(parsed),
            confidence,
            self._systems_in(comparison.ranking, intervals, values),
            comparison.ranking,
            comparison.adjacent,
            self._per_query(comparison.ranking, values),
            agreement,
            pairs=comparison.pairs,
        )

    def _systems_in(
        self,
        ranking: Sequence[str],
        intervals: Mapping[str, Mapping[str, Interval]],
        values: Mapping[str, Mapping[str, Mapping[str, float | None]]],
    ) -> list[SystemResults]:
        return [
            SystemResults(
                system,
                sum(v is not None for v in values[system][self._primary].values()),
                {name: intervals[name][system] for name in self._parsed},
            )
            for system in ranking
        ]

    def _per_query(
        self,
        ranking: Sequence[str],
        values: Mapping[str, Mapping[str, Mapping[str, float | None]]],
    ) -> dict[str, dict[str, dict[str, float | None]]]:
        return {
            qid: {
                system: {name: values[system][name][qid] for name in self._parsed}
                for system in ranking
            }
            for qid in sorted(self._queries)
        }

    def _prediction_powered(self, confidence: float, alpha: float) -> StudyResults:
        """Every mean and paired difference prediction-powered (module docstring): the study's
        own values on every query, corrected by the sample's human values, with one power
        weight per measure pooled over the systems."""
        own, sampled, primary = self._values, self._sample_values, self._primary
        predicted = self._predicted
        estimates: dict[str, dict[str, PredictionPowered]] = {}
        for name in self._parsed:
            families = [
                (predicted[system][name], sampled[system][name]) for system in self._systems
            ]
            weight = pooled_weight(families)
            estimates[name] = {
                system: prediction_powered_mean(predicted, human, confidence, weight)
                for system, (predicted, human) in zip(self._systems, families, strict=True)
            }
        means = {system: estimates[primary][system].mean for system in self._systems}
        ranking = rank_by_mean(means)
        intervals = {
            name: {system: _within(e, 0.0) for system, e in by_system.items()}
            for name, by_system in estimates.items()
        }
        pairs = self._ppi_pairs(ranking, confidence, alpha)
        neighbours = set(pairwise(ranking))
        # Reported per query: the sample's queries under their human labels.
        reported = {
            system: {name: {**own[system][name], **sampled[system][name]} for name in self._parsed}
            for system in self._systems
        }
        return StudyResults(
            primary,
            list(self._parsed),
            confidence,
            self._systems_in(ranking, intervals, reported),
            ranking,
            [pair for pair in pairs if (pair.better, pair.worse) in neighbours],
            self._per_query(ranking, reported),
            self._agreement(means, ranking) if self._with_human else None,
            pairs=pairs,
            interval_method="ppi",
            sample=self._sample_agreement(),
            study_means={
                system: {
                    name: mean_over_queries(list(predicted[system][name].values()))
                    for name in self._parsed
                }
                for system in self._systems
            },
        )

    def _ppi_pairs(
        self, ranking: Sequence[str], confidence: float, alpha: float
    ) -> list[PairComparison]:
        """Every pair of `ranking` on the primary measure: the prediction-powered mean
        difference, its t test, Holm-adjusted over the pairs."""
        predicted, sampled, primary = self._predicted, self._sample_values, self._primary
        ordered = [(a, b) for i, a in enumerate(ranking) for b in ranking[i + 1 :]]
        families = [
            (
                _differences(predicted[a][primary], predicted[b][primary]),
                _differences(sampled[a][primary], sampled[b][primary]),
            )
            for a, b in ordered
        ]
        weight = pooled_weight(families)
        estimates = [prediction_powered_mean(f, y, confidence, weight) for f, y in families]
        adjusted = holm_adjusted([e.p_value for e in estimates])
        pairs = []
        for (better, worse), estimate, p_holm in zip(ordered, estimates, adjusted, strict=True):
            bounded = _within(estimate, -1.0)
            test = PairedTest(
                bounded.mean, bounded.low, bounded.high, estimate.p_value, estimate.queries
            )
            distinguishable = p_holm is not None and p_holm < alpha
            pairs.append(PairComparison(better, worse, test, p_holm, distinguishable))
        return pairs

    def _sample_agreement(self) -> SampleAgreement:
        ours, theirs = list(self._sample_ours), list(self._sample_theirs)
        grades = list(range(min(ours + theirs), max(ours + theirs) + 1)) if ours else []
        per_grade: dict[int, tuple[int, float | None]] = {}
        for grade in grades:
            labelled = [o for o, t in zip(ours, theirs, strict=True) if t == grade]
            same = sum(o == grade for o in labelled)
            per_grade[grade] = (len(labelled), same / len(labelled) if labelled else None)
        return SampleAgreement(
            queries=self._sample_queries,
            pairs=len(ours),
            kappa=cohen_kappa(ours, theirs, categories=grades),
            weighted_kappa=cohen_kappa(ours, theirs, "linear", categories=grades),
            confusion=confusion_matrix(ours, theirs, categories=grades),
            grades=per_grade,
        )

    def _agreement(
        self, study_means: Mapping[str, float | None], ranking: Sequence[str]
    ) -> Agreement:
        ours, theirs = list(self._ours), list(self._theirs)
        grades = list(range(min(ours + theirs), max(ours + theirs) + 1)) if ours else []
        human_measures = {
            system: {
                name: mean_over_queries(list(by_query.values()))
                for name, by_query in self._human_values[system].items()
            }
            for system in self._systems
        }
        human_means = {system: means[self._primary] for system, means in human_measures.items()}
        human_ranking = rank_by_mean(human_means)
        # τ-b of the means themselves, so that systems tied on one side count as tied there.
        paired_means = [
            (ours_mean, human_mean)
            for system in sorted(self._systems)
            if (ours_mean := study_means[system]) is not None
            and (human_mean := human_means[system]) is not None
        ]
        return Agreement(
            pairs=len(ours),
            kappa=cohen_kappa(ours, theirs, categories=grades),
            weighted_kappa=cohen_kappa(ours, theirs, "linear", categories=grades),
            confusion=confusion_matrix(ours, theirs, categories=grades),
            kendall_tau=kendall_tau_b([m for m, _ in paired_means], [m for _, m in paired_means]),
            rbo=rank_biased_overlap(ranking, human_ranking, RBO_PERSISTENCE).value,
            human_ranking=human_ranking,
            human_measures={system: human_measures[system] for system in human_ranking},
        )


def _within(estimate: PredictionPowered, lowest: float) -> Interval:
    """The estimate and its interval within a measure's range, [lowest, 1] (every measure of a
    study lies in [0, 1], a difference of two in [-1, 1]): a corrected mean can step past it."""

    def bounded(value: float | None) -> float | None:
        return None if value is None else min(1.0, max(lowest, value))

    return Interval(bounded(estimate.mean), bounded(estimate.low), bounded(estimate.high))


def _differences(
    a: Mapping[str, float | None], b: Mapping[str, float | None]
) -> dict[str, float | None]:
    """Per query a − b, None where either is NA."""
    return {
        qid: None if value is None or (other := b.get(qid)) is None else value - other
        for qid, value in a.items()
    }


def _parse_measures(measures: Sequence[str]) -> dict[str, Measure]:
    parsed: dict[str, Measure] = {}
    for name in measures:
        measure = parse_measure(name)
        if measure in parsed.values():
            raise ValueError(f"measure {name!r} is listed twice")
        parsed[name] = measure
    if not parsed:
        raise ValueError("no measures given")
    return parsed


def _name_of(measure: Measure, parsed: Mapping[str, Measure]) -> str:
    for name, candidate in parsed.items():
        if candidate == measure:
            return name
    raise ValueError(f"primary measure {measure} is not among the measures {list(parsed)}")


def _values_by_name(
    parsed: Mapping[str, Measure],
    qrels: Mapping[str, Mapping[str, int]],
    run: Mapping[str, Mapping[str, float]],
    scale: GradeScale,
) -> dict[str, dict[str, float | None]]:
    """Measure name -> query id -> value, for every query of ``qrels``."""
    evaluation = evaluate(parsed.values(), qrels, run, all_queries=True, scale=scale)
    return {name: evaluation.per_query[measure] for name, measure in parsed.items()}
