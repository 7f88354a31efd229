"""Offline judges: free, need no network, used for the default job, demos, tests and benchmarks.

`lexical` is BM25 over the job's own candidate pool. It is NOT an LLM: it ranks by term
overlap with the query and ignores the rubric. It exists so the service runs end to end with no
API keys. Its scores are pool-level (each candidate scored once, when the job starts) and equal
scores are broken by the pool's order, so it is one total order of the pool: every batch it
judges agrees with every other, whatever the presentation order.

`oracle` reads a hidden numeric score from candidate metadata and adds fresh Gaussian
noise on every call, so that real disagreement (non-transitive verdicts) occurs. With a
`profile` it is instead one of the simulated LLM judges of the ranking benchmark (strong,
weak, position-biased, ...: judges/simulated.py), so that a study judged on the server and
the benchmark's tournaments judge with the same model. That module, and numpy with it, is
imported only where a profile is named: every server and admin tool imports this one at
start-up, where numpy's import alone was about a tenth of a second.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import math
import random
import re
from collections import Counter
from collections.abc import Mapping
from dataclasses import replace
from functools import cached_property
from typing import TYPE_CHECKING

from tierank.server.judges.base import (
    BatchRequest,
    FailureKind,
    Judge,
    JudgeConfig,
    JudgeConfigError,
    JudgeFailure,
    JudgeReply,
    JudgeUsage,
    PoolContext,
)
from tierank.server.judges.options import float_option, refuse_unknown_options

if TYPE_CHECKING:
    from tierank.server.judges.simulated import JudgeProfile, JudgeWorld

_TOKEN = re.compile(r"\w+", re.UNICODE)


# The oracle's noise (standard deviation) without a `noise` option or a profile.
ORACLE_NOISE = 0.5


def estimate_tokens(text: str) -> int:
    """The prompt-size rule offline judges report: one token per 4 characters, rounded up."""
    return math.ceil(len(text) / 4)


def _words(text: str) -> list[str]:
    return [w.lower() for w in _TOKEN.findall(text)]


class _OfflineJudge(Judge):
    # Keys a job spec may put in JudgeConfig.options for this judge.
    known_options: frozenset[str] = frozenset()

    def __init__(self, config: JudgeConfig, pool: PoolContext) -> None:
        super().__init__(config)
        refuse_unknown_options(config.options, self.known_options, config.provider)
        # Counted once per job: the scheduler asks for estimates many times per verdict.
        self._query_tokens = estimate_tokens(pool.query)
        self._passage_tokens = {p.id: estimate_tokens(p.text) for p in pool.passages}

    def estimate(self, request: BatchRequest) -> JudgeUsage:
        shown = sum(self._passage_tokens[p.id] for p in request.passages)
        return JudgeUsage(input_tokens=self._query_tokens + shown)

    def _reply(
        self,
        request: BatchRequest,
        scores: Mapping[str, float],
        tie_rank: Mapping[str, int] | None = None,
    ) -> JudgeReply:
        """Best score first; equal scores go to the lower `tie_rank`, or without one keep the
        presented order (the sort is stable), so ties never depend on hashing."""
        ids = (p.id for p in request.passages)
        if tie_rank is None:
            ordering = sorted(ids, key=lambda pid: -scores[pid])
        else:
            ordering = sorted(ids, key=lambda pid: (-scores[pid], tie_rank[pid]))
        return JudgeReply(ordering=tuple(ordering), usage=self.estimate(request))


class LexicalJudge(_OfflineJudge):
    """BM25 (k1=0.9, b=0.4, Anserini's defaults) with statistics from the job's pool."""

    K1 = 0.9
    B = 0.4

    def __init__(self, config: JudgeConfig, pool: PoolContext) -> None:
        super().__init__(config, pool)
        docs = {p.id: Counter(_words(p.text)) for p in pool.passages}
        lengths = {pid: sum(tf.values()) for pid, tf in docs.items()}
        average_length = (sum(lengths.values()) / len(lengths)) if lengths else 0.0
        document_frequency = Counter(term for tf in docs.values() for term in tf)
        n = len(docs)
        # Counted once: a long query repeats terms, and scoring each occurrence against every
        # passage of a 10,000-candidate pool would stall the event loop for seconds.
        query_terms = Counter(_words(pool.query))
        idf = {
            term: math.log(1 + (n - df + 0.5) / (df + 0.5))
            for term in query_terms
            if (df := document_frequency[term])
        }
        self._scores: dict[str, float] = {}
        # Ties go to the earlier candidate of the pool (its retrieval order), never to the
        # order a batch happens to present them in.
        self._pool_rank = {p.id: i for i, p in enumerate(pool.passages)}
        pool_material = json.dumps([pool.query, [p.text for p in pool.passages]])
        self._pool_digest = hashlib.sha256(pool_material.encode()).hexdigest()[:16]
        for pid, tf in docs.items():
            norm = self.K1 * (1 - self.B + self.B * lengths[pid] / (average_length or 1.0))
            score = 0.0
            for term, term_idf in idf.items():
                f = tf.get(term, 0)
                if f:
                    score += query_terms[term] * term_idf * f * (self.K1 + 1) / (f + norm)
            self._scores[pid] = score

    def cache_identity(self) -> str:
        # Scores and ties depend on the whole pool, so a verdict is only reusable in the same pool.
        return f"{self.judge_identity()}/pool={self._pool_digest}"

    def judge_identity(self) -> str:
        return f"lexical/bm25(k1={self.K1},b={self.B})"

    async def judge(self, request: BatchRequest) -> JudgeReply:
        return self._reply(request, self._scores, self._pool_rank)


class OracleJudge(_OfflineJudge):
    """Hidden score from metadata plus N(0, noise²) per passage per call.

    Options: `score_key` (default "score"), `noise` (standard deviation, default ORACLE_NOISE),
    `latency_ms` (simulated call latency, default 0, at most MAX_LATENCY_MS), `fail_rate`
    (share of calls that fail as unparseable, 0 to 1, default 0), `profile` (a simulated
    judge of judges/simulated.py, by name: the hidden score is its grade, and `noise` and
    `fail_rate`, when given, replace the profile's own).
    """

    # `bias` is the pointwise grader's (judges/graders.py): a constant added to every hidden
    # score changes no order, so the listwise oracle takes it and does nothing with it.
    known_options = frozenset({"score_key", "noise", "latency_ms", "fail_rate", "profile", "bias"})
    MAX_LATENCY_MS = 60_000.0

    def __init__(self, config: JudgeConfig, pool: PoolContext) -> None:
        super().__init__(config, pool)
        options = config.options
        self._score_key = options.get("score_key", "score")
        self._latency_s = float_option(options, "latency_ms", 0.0, self.MAX_LATENCY_MS) / 1000
        named = profile_named(options)
        self._noise = float_option(options, "noise", named.noise if named else ORACLE_NOISE)
        default_fail_rate = named.failure_rate if named else 0.0
        self._fail_rate = float_option(options, "fail_rate", default_fail_rate, 1.0)
        self._profile = (
            replace(named, noise=self._noise, failure_rate=self._fail_rate) if named else None
        )
        self._pool = pool
        self._scores: dict[str, float] = {}
        for passage in pool.passages:
            raw = passage.metadata.get(self._score_key)
            try:
                score = float(raw)  # type: ignore[arg-type]
            except (TypeError, ValueError):
                score = math.nan
            if math.isfinite(score):
                self._scores[passage.id] = score
            else:
                raise JudgeConfigError(
                    "parameters.options.score_key",
                    f"the oracle judge needs a finite numeric metadata[{self._score_key!r}] on "
                    f"every candidate; candidate {passage.id!r} has {raw!r}",
                ) from None

    @property
    def cacheable(self) -> bool:
        return False  # fresh noise on every call is the point

    def cache_identity(self) -> str:
        if self._profile:
            return f"oracle/{self._score_key}/profile={self._profile.name}/noise={self._noise}"
        return f"oracle/{self._score_key}/noise={self._noise}"

    @cached_property
    def _world(self) -> JudgeWorld:
        """The simulated judge's fixed draws for this job: built on the first call, as a job
        built only to learn the judge's identity makes none."""
        from tierank.server.judges.simulated import JudgeWorld

        passages = self._pool.passages
        return JudgeWorld(
            self._pool.query,
            [p.id for p in passages],
            [self._scores[p.id] for p in passages],
            [len(p.text) for p in passages],
            self._pool.seed,
        )

    async def judge(self, request: BatchRequest) -> JudgeReply:
        if self._latency_s:
            await asyncio.sleep(self._latency_s)
        # The simulated latency is what the call took, as an LLM judge reports its round trip.
        usage = replace(self.estimate(request), latency_s=self._latency_s)
        if self._profile:
            import numpy as np

            from tierank.server.judges.simulated import simulated_answer

            presented = tuple(p.id for p in request.passages)
            rng = np.random.default_rng(request.seed)
            answer = simulated_answer(self._profile, self._world, presented, rng)
        else:
            answer = self._noisy_order(request)
        if answer is None:
            return JudgeReply(
                ordering=(),
                usage=usage,
                failure=JudgeFailure(FailureKind.UNPARSEABLE, "oracle simulated a bad answer"),
            )
        return JudgeReply(ordering=answer, usage=usage)

    def _noisy_order(self, request: BatchRequest) -> tuple[str, ...] | None:
        """Without a profile: each score plus its noise, best first; None for a failed call."""
        rng = random.Random(request.seed)
        if self._fail_rate and rng.random() < self._fail_rate:
            return None
        noisy = {p.id: self._scores[p.id] + rng.gauss(0.0, self._noise) for p in request.passages}
        return self._reply(request, noisy).ordering


def profile_named(options: Mapping[str, str]) -> JudgeProfile | None:
    """The simulated judge the `profile` option names; None without one (plain noise)."""
    name = options.get("profile")
    if not name:
        return None
    from tierank.server.judges.simulated import PROFILES

    profile = PROFILES.get(name)
    if profile is None:
        rule = f"unknown profile {name[:40]!r}; known: {', '.join(sorted(PROFILES))}"
        raise JudgeConfigError("parameters.options.profile", rule)
    return profile
