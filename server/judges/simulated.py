"""Simulated LLM judges driven by known grades: the judge models of the ranking benchmark
(bench/ranking) and of the `oracle` judge's `profile` option, defined here once. Pure: numpy
and the caller's random generators, no I/O.

A judge orders a batch by a latent utility drawn afresh on every call:

    utility = grade + fine offset + judge error + judge bias + primacy(position)
              + noise(position, batch size)

- grade: the human qrel (the benchmark) or the candidate's hidden score (the oracle judge).
- fine offset: one draw per passage and seed, uniform in ±FINE_SPREAD/2 (< 0.5, so it never
  crosses a grade). It stands for the real differences a judge perceives inside one coarse human
  grade and makes a judge order two equally graded passages the same way most of the time.
  Without it a third of the top-20 triples of DL19 (all three passages of one grade) would be
  coin flips, which alone gives ~8% cyclic triples: no judge could be as transitive as a
  GPT-4-class one (4–8%).
- judge error: one draw per (judge, passage, seed), Gaussian with sd ``persistent_error``: a real
  judge misreads some passages the same way on every call. It costs accuracy without costing
  transitivity, and it is what lets a GPT-4-class judge (few cycles) still land near the published
  nDCG@10 of GPT-4 reranking (0.73–0.75 on DL19) instead of near the ideal (0.89).
- judge bias: persistent per-judge preferences (longer passages, higher first-stage rank), used to
  make the ensemble's judges disagree systematically.
- primacy: a bonus for the first position fading linearly to 0 at the last.
- noise: Gaussian; its deviation grows for positions in the middle of long batches ("lost in the
  middle"): ``sd = noise * (1 + lost_in_middle * 4x(1-x) * (k-2)/18)`` with x the relative
  position, so a pair (k=2) has none and a batch of 20 has the full effect.
- failure: with probability ``failure_rate`` the answer is unparseable and the call yields nothing.
- position profile (a real small judge's, measured): with probability ``repeat_shown`` the answer
  is the shown order itself; otherwise, with probability ``first_shown``, the first-shown
  candidate is moved to the front of the judge's usual answer. Qwen2.5-Coder-1.5B-Instruct,
  qualified on DL19 (issue 16), put the first-shown passage first in 40% of its answers at k=10
  (1/k: 10%) and repeated the shown order in 22%; POSITION_PROFILE reproduces both shares
  (tests/bench checks them). At k=5 it preferred the *last* passages instead (issue 34: 14 of
  17 answers began with the passage shown 4th or 5th), which ``last_shown`` models: with that
  probability the answer starts with the last-shown candidate and goes on in the shown order
  (``[5] > [1] > [2] > [3] > [4]``), an answer whose Kendall tau with the shown order is
  near 0 (+0.2 at k=5), so only a preferred-position test catches it (scheduler/bias.py).
"""

from __future__ import annotations

import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

import numpy as np

FINE_SPREAD = 0.9
# Batch size at which the lost-in-the-middle effect is at its full strength.
MIDDLE_REFERENCE_K = 20


def seeded_rng(seed: int, *names: str) -> np.random.Generator:
    """A generator fixed by the seed and names, independent of Python's hash randomisation."""
    return np.random.default_rng([seed, *(zlib.crc32(name.encode()) for name in names)])


@dataclass(frozen=True)
class JudgeProfile:
    name: str
    noise: float
    lost_in_middle: float
    primacy: float
    failure_rate: float
    persistent_error: float = 0.0
    # Utility per standard deviation of log passage length.
    length_bias: float = 0.0
    # Utility for the first-stage top candidate, fading linearly to 0 at the last.
    first_stage_bias: float = 0.0
    # Position profile: chance of answering with the shown order, else of ranking the
    # first-shown candidate first; and, before either, of answering with the last-shown
    # candidate first and the rest in the shown order.
    repeat_shown: float = 0.0
    first_shown: float = 0.0
    last_shown: float = 0.0


class JudgeWorld:
    """The per-passage parts of the utility that stay fixed across calls for one query and seed.

    `candidates` are in first-stage order (best first); `grades` and `lengths` (characters of
    each passage) follow them. `query` names the query in the seeds of what is drawn."""

    def __init__(
        self,
        query: str,
        candidates: Sequence[str],
        grades: Sequence[float],
        lengths: Sequence[int],
        seed: int,
    ) -> None:
        rng = seeded_rng(seed, "world", query)
        offsets = rng.uniform(-FINE_SPREAD / 2, FINE_SPREAD / 2, size=len(candidates))
        log_lengths = np.log([length + 1 for length in lengths])
        spread = log_lengths.std() or 1.0
        self.length_z = (log_lengths - log_lengths.mean()) / spread
        self.first_stage = 1.0 - np.arange(len(candidates)) / max(len(candidates) - 1, 1)
        self.index = {pid: i for i, pid in enumerate(candidates)}
        self.merit = np.array(grades, dtype=float) + offsets
        self._seed = seed
        self._query = query
        self._judge_errors: dict[str, np.ndarray] = {}

    def judge_error(self, profile: JudgeProfile) -> np.ndarray:
        """The judge's fixed misreading of each candidate, drawn on first use."""
        if profile.name not in self._judge_errors:
            rng = seeded_rng(self._seed, "judge-error", self._query, profile.name)
            errors = rng.normal(0.0, profile.persistent_error, size=len(self.merit))
            self._judge_errors[profile.name] = errors
        return self._judge_errors[profile.name]


def simulated_answer(
    profile: JudgeProfile,
    world: JudgeWorld,
    presented: tuple[str, ...],
    rng: np.random.Generator,
) -> tuple[str, ...] | None:
    """The judge's ordering of ``presented`` (best first), or None for an unparseable answer."""
    if profile.failure_rate and rng.random() < profile.failure_rate:
        return None
    if profile.last_shown and rng.random() < profile.last_shown:
        return (presented[-1], *presented[:-1])
    if profile.repeat_shown and rng.random() < profile.repeat_shown:
        return presented
    answer = _usual_order(profile, world, presented, rng)
    if profile.first_shown and rng.random() < profile.first_shown:
        answer = (presented[0], *(pid for pid in answer if pid != presented[0]))
    return answer


def _usual_order(
    profile: JudgeProfile,
    world: JudgeWorld,
    presented: tuple[str, ...],
    rng: np.random.Generator,
) -> tuple[str, ...]:
    p = profile
    k = len(presented)
    idx = np.array([world.index[pid] for pid in presented])
    x = np.arange(k) / max(k - 1, 1)
    middle = 4 * x * (1 - x) * max(0.0, (k - 2) / (MIDDLE_REFERENCE_K - 2))
    sd = p.noise * (1 + p.lost_in_middle * middle)
    utility = (
        world.merit[idx]
        + world.judge_error(p)[idx]
        + p.length_bias * world.length_z[idx]
        + p.first_stage_bias * world.first_stage[idx]
        + p.primacy * (1 - x)
        + sd * rng.standard_normal(k)
    )
    # Stable sort: exact ties (only a noise-free judge has them) keep the presented order.
    return tuple(presented[i] for i in np.argsort(-utility, kind="stable"))


# Calibrated with `python -m tierank.bench.ranking calibrate` (see bench/ranking/RESULTS.md):
# a GPT-4-class judge and a weak one, by their share of cyclic triples on DL19.
STRONG = JudgeProfile(
    "strong", noise=0.55, lost_in_middle=1.0, primacy=0.05, failure_rate=0.02, persistent_error=0.6
)
WEAK = JudgeProfile(
    "weak", noise=2.6, lost_in_middle=1.0, primacy=0.2, failure_rate=0.02, persistent_error=0.6
)
# The position profile of a real small judge (module docstring): at k=10 about 40% of the
# answers rank the first-shown candidate first and 22% repeat the shown order.
POSITION_PROFILE = {"repeat_shown": 0.22, "first_shown": 0.18}
STRONG_POSITION = replace(STRONG, name="strong-position", **POSITION_PROFILE)
WEAK_POSITION = replace(WEAK, name="weak-position", **POSITION_PROFILE)
# A judge at chance (its grades drown in noise) with that position profile: what
# Qwen2.5-Coder-1.5B-Instruct was on DL19.
CHANCE = replace(WEAK, name="chance", noise=100.0, **POSITION_PROFILE)
# A weak judge that, in 70% of its answers, starts from the end of the list shown and then
# repeats it (module docstring): what live detection must catch by its preferred position.
WEAK_LAST_FIRST = replace(WEAK, name="weak-last-first", last_shown=0.7)
# Three GPT-4-class judges, each with its own persistent misreadings and one extra bias.
ENSEMBLE = (
    replace(STRONG, name="strong-primacy", primacy=0.3),
    replace(STRONG, name="strong-long", length_bias=0.3),
    replace(STRONG, name="strong-lexical", first_stage_bias=0.6),
)
# Every profile by its name: what the oracle judge's `profile` option accepts.
PROFILES: Mapping[str, JudgeProfile] = {
    profile.name: profile
    for profile in (
        STRONG,
        WEAK,
        STRONG_POSITION,
        WEAK_POSITION,
        WEAK_LAST_FIRST,
        CHANCE,
        *ENSEMBLE,
    )
}
