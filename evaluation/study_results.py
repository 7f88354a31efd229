"""A study's results: systems scored against its labels, compared, and checked against humans.

The fields are named as in the study report (``tierank.study.report/1``): ``systems[].measures``,
``ranking``, ``comparisons``, ``per_query[].measures`` and ``agreement``.
"""

from __future__ import annotations

from array import array
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from tierank.evaluation.agreement import ConfusionMatrix, cohen_kappa, confusion_matrix
from tierank.evaluation.comparison import (
    AdjacentComparison,
    Interval,
    compare_systems,
    mean_over_queries,
    rank_by_mean,
    system_intervals,
)
from tierank.evaluation.correlation import kendall_tau_b, rank_biased_overlap
from tierank.evaluation.formats import Qrels, Run
from tierank.evaluation.measures import Measure, parse_measure
from tierank.evaluation.scoring import evaluate
from tierank.evaluation.set_measures import TREC_DL_SCALE, GradeScale

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
class StudyResults:
    """Systems (in ``ranking`` order), the ranking by the primary measure and its adjacent
    comparisons, every value per query (query id -> system -> measure -> value, None for NA)
    and, given human qrels, the agreement with them."""

    primary_measure: str
    measures: list[str]
    confidence: float
    systems: list[SystemResults]
    ranking: list[str]
    comparisons: list[AdjacentComparison]
    per_query: dict[str, dict[str, dict[str, float | None]]]
    agreement: Agreement | None


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
        # The grades of the (query, document) pairs both label: ours, theirs (small ints).
        self._ours = array("h")
        self._theirs = array("h")
        self._queries: list[str] = []

    def add(
        self,
        qid: str,
        labels: Mapping[str, int],
        runs: Mapping[str, Mapping[str, float]],
        human: Mapping[str, int] | None = None,
    ) -> None:
        """One query: its labels, each system's scored documents for it (a system missing
        retrieved nothing), and its human grades (None: the human qrels do not judge it)."""
        self._queries.append(qid)
        for system in self._systems:
            run = {qid: runs.get(system, {})}
            for name, by_query in _values_by_name(
                self._parsed, {qid: labels}, run, self._scale
            ).items():
                self._values[system][name][qid] = by_query[qid]
            if human is not None:
                for name, by_query in _values_by_name(
                    self._parsed, {qid: human}, run, self._scale
                ).items():
                    self._human_values[system][name][qid] = by_query[qid]
        if human is not None:
            for docid in sorted(labels):
                if docid in human:
                    self._ours.append(labels[docid])
                    self._theirs.append(human[docid])

    def results(
        self,
        *,
        confidence: float = 0.95,
        alpha: float = 0.05,
        samples: int = 10_000,
        seed: int = 0,
    ) -> StudyResults:
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
        systems = [
            SystemResults(
                system,
                sum(v is not None for v in values[system][primary_name].values()),
                {name: intervals[name][system] for name in parsed},
            )
            for system in comparison.ranking
        ]
        per_query = {
            qid: {
                system: {name: values[system][name][qid] for name in parsed}
                for system in comparison.ranking
            }
            for qid in sorted(self._queries)
        }
        agreement = None
        if self._with_human:
            study_means = {system: i.mean for system, i in comparison.intervals.items()}
            agreement = self._agreement(study_means, comparison.ranking)
        return StudyResults(
            primary_name,
            list(parsed),
            confidence,
            systems,
            comparison.ranking,
            comparison.adjacent,
            per_query,
            agreement,
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
