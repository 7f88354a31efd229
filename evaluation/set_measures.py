"""The set-based family of ../shared/METRICS.md: RA-nWG@K, PROC@K, %PROC@K, N-Recall,
Precision4+, Harm.

These measures score the unordered set S_K of the K passages handed to a RAG prompt, on a 1–5
utility scale (5 decisive, 4 highly relevant, 3 partial, 2 weak, 1 distractor or harmful).
Other grade scales are mapped onto it by a :class:`GradeScale` first.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field


@dataclass(frozen=True)
class GradeScale:
    """Maps a label scale onto the 1–5 utility scale.

    ``unjudged_utility`` is the utility of a document absent from the judgments; the default 1
    follows the TREC convention that an unjudged document counts as the lowest grade, so it
    adds no gain and counts as harm. ``None`` makes unjudged documents neutral: no gain, no harm.
    """

    utilities: Mapping[int, int]
    unjudged_utility: int | None = 1

    def __post_init__(self) -> None:
        bad = {grade: u for grade, u in self.utilities.items() if u not in range(1, 6)}
        if bad:
            raise ValueError(f"utilities must lie in 1..5, got {bad}")

    def utility(self, grade: int) -> int:
        try:
            return self.utilities[grade]
        except KeyError:
            known = sorted(self.utilities)
            raise ValueError(f"grade {grade} is not on this scale (grades {known})") from None


UTILITY_SCALE = GradeScale({g: g for g in range(1, 6)})
"""1–5 labels, used as they are."""

TREC_DL_SCALE = GradeScale({0: 1, 1: 2, 2: 4, 3: 5})
"""TREC DL 0–3: irrelevant→1, related→2 (weak), highly relevant→4, perfectly relevant→5.

Grade 2 maps to 4 so that DL's binary convention (relevant = grade >= 2) coincides with
N-Recall4+ / Precision4+ (utility >= 4).
"""

GRADED_0_4_SCALE = GradeScale({0: 1, 1: 2, 2: 3, 3: 4, 4: 5})
"""0–4 labels (e.g. TREC iKAT): shifted up by one."""


@dataclass(frozen=True)
class SetParams:
    """Parameters of the RA-nWG weights; the defaults are those of ../shared/METRICS.md."""

    base: Mapping[int, float] = field(
        default_factory=lambda: {5: 1.0, 4: 0.5, 3: 0.1, 2: 0.0, 1: 0.0}
    )
    alpha: float = 1.0
    cap4: float = 1.0
    cap3: float = 0.25
    fallback: Mapping[int, float] = field(
        default_factory=lambda: {5: 1.0, 4: 1.0, 3: 0.2, 2: 0.0, 1: 0.0}
    )

    def __post_init__(self) -> None:
        if min(self.alpha, self.cap4, self.cap3) < 0:
            raise ValueError("alpha, cap4 and cap3 must not be negative")


def utility_weights(
    pool_utilities: Collection[int], params: SetParams = SetParams()
) -> dict[int, float]:
    """Weight of each utility 1–5 given the labelled pool U (a collection of utilities).

    r_g = b_g / p_g^alpha (0 if p_g = 0); w5 = 1, w4 = min(r4/r5, cap4), w3 = min(r3/r5, cap3),
    w2 = w1 = 0. With no grade-5 passage in U the fixed fallback weights apply.
    """
    counts = Counter(pool_utilities)
    if counts[5] == 0:
        return dict(params.fallback)
    size = len(pool_utilities)

    def rarity(grade: int) -> float:
        prevalence = counts[grade] / size
        return params.base[grade] / prevalence**params.alpha if prevalence > 0 else 0.0

    r5 = rarity(5)
    return {
        5: 1.0,
        4: min(rarity(4) / r5, params.cap4),
        3: min(rarity(3) / r5, params.cap3),
        2: 0.0,
        1: 0.0,
    }


@dataclass(frozen=True)
class SetScores:
    """One query's set-based scores; ``None`` marks NA."""

    ra_nwg: float | None
    proc: float | None
    pct_proc: float | None
    n_recall_4plus: float | None
    n_recall_5: float | None
    precision_4plus: float
    harm: float


def _top_weight_sum(weights: Iterable[float], k: int) -> float:
    return sum(sorted(weights, reverse=True)[:k])


def set_scores(
    pool: Mapping[str, int],
    selected: Sequence[str],
    k: int,
    retrieved: Collection[str] | None = None,
    params: SetParams = SetParams(),
    unjudged_utility: int | None = 1,
) -> SetScores:
    """Score the selected set S_K against the labelled pool U.

    ``pool`` maps every labelled passage of the query to its 1–5 utility (U). ``selected`` is S_K;
    only its first ``k`` entries are used. ``retrieved`` is the retrieval pool P (S_K ⊆ P) for
    PROC; without it P = S_K. A passage not in U has ``unjudged_utility`` (None: it has no
    utility at all, so it adds no gain and no harm).
    """
    if k <= 0:
        raise ValueError(f"K must be positive, got {k}")
    weights = utility_weights(list(pool.values()), params)
    chosen = list(selected[:k])
    retrieval_pool = set(chosen) | set(retrieved or ())

    def utility_of(docid: str) -> int | None:
        return pool.get(docid, unjudged_utility)

    def weight_of(docid: str) -> float:
        u = utility_of(docid)
        return 0.0 if u is None else weights[u]

    oracle = _top_weight_sum((weights[u] for u in pool.values()), k)
    observed = sum(weight_of(d) for d in chosen)
    pool_best = _top_weight_sum((weight_of(d) for d in retrieval_pool), k)
    ra_nwg = observed / oracle if oracle > 0 else None
    proc = pool_best / oracle if oracle > 0 else None
    pct_proc = ra_nwg / proc if ra_nwg is not None and proc else None

    chosen_utilities = [utility_of(d) for d in chosen]
    counts = Counter(pool.values())
    r4plus, r5 = counts[4] + counts[5], counts[5]
    g4plus = sum(1 for u in chosen_utilities if u is not None and u >= 4)
    g5 = sum(1 for u in chosen_utilities if u == 5)
    harmful = sum(1 for u in chosen_utilities if u is not None and u <= 2)
    return SetScores(
        ra_nwg=ra_nwg,
        proc=proc,
        pct_proc=pct_proc,
        n_recall_4plus=g4plus / min(k, r4plus) if r4plus else None,
        n_recall_5=g5 / min(k, r5) if r5 else None,
        precision_4plus=g4plus / k,
        harm=harmful / k,
    )
