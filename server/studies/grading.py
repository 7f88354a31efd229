"""Pointwise probes of a study's queries: once a query's job has ended, a few of its documents
are graded along its tier order, and the study's labels are read off the orders and probes
(evaluation/grade_model.py).

Which documents: `plan_probes` spreads half of a query's probes along the order and gives the
rest to the documents whose place in the compared systems' top ranks differs most between
systems (a document every system ranks alike cannot change a comparison). How many: the
study's probe rate times the pool's size, at least MIN_PROBES. What they may cost: the query's
share of the study's budget reserves its probes' worst case first (at most MAX_PROBE_SHARE of
the share), and the probes stop before they would pass that reservation, so a study with a
budget never overshoots it.

Every probe goes through the one paid grading path (the verdict cache, the tenant's spend
ledger), so a probe asked again after a restart is answered from the cache where the grader's
answers are cacheable, and never paid twice.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import anyio
import structlog

from tierank.evaluation import parse_measure
from tierank.evaluation.grade_model import plan_probes
from tierank.limits import DEFAULT_PROBE_RATE, MAX_PROBE_SHARE, MIN_PROBES
from tierank.server.errors import InvalidInput, QuotaExceeded
from tierank.server.judges.base import JudgeUsage, Passage
from tierank.server.judges.graders import Grader, GradeRequest
from tierank.server.judges.registry import JudgeFactory
from tierank.server.labeling.grading import Pair, PairGrader, build_grader
from tierank.server.storage.base import VerdictCache
from tierank.server.studies.pools import RETRIEVED_BY_KEY
from tierank.server.tenancy.provider_accounts import ProviderAccounts
from tierank.server.tenancy.spending import SpendLedger
from tierank.server.wire.specs import passage_of
from tierank.v1 import eval_pb2, rank_pb2, study_pb2

log = structlog.get_logger()

# Where the compared systems' top ranks end when the study's first measure has no cutoff.
_DEFAULT_CUTOFF = 10
# Probes of one query asked at once.
_PROBES_IN_FLIGHT = 4
_GRADER_FIELD = "spec.labels.pointwise.judge"


def probe_rate(spec: study_pb2.StudySpec) -> float:
    return spec.labels.pointwise.probe_rate or DEFAULT_PROBE_RATE


def probe_count(pool_size: int, rate: float) -> int:
    """Probes for a pool of `pool_size` documents at `rate` probes per document."""
    return min(pool_size, max(MIN_PROBES, math.floor(rate * pool_size)))


def default_mapping(
    spec: study_pb2.StudySpec, grades: Callable[[str], bool]
) -> eval_pb2.TierMapping | None:
    """The labels a study gets when it names none: pointwise anchoring with the first of its
    judges whose provider `grades`, seeded as its ranking; None when none can grade."""
    for judge in spec.ranking.judges:
        if grades(judge.provider):
            mapping = eval_pb2.TierMapping()
            mapping.pointwise.judge.CopyFrom(judge)
            mapping.pointwise.seed = spec.ranking.seed
            return mapping
    return None


def leverage(
    candidates: Sequence[rank_pb2.Candidate], systems: Sequence[str], cutoff: int
) -> list[float]:
    """Per candidate, how differently the systems weigh it in their top `cutoff`: the variance
    over `systems` of its discount 1/log2(rank + 1) there (0 below the cutoff or unretrieved)."""
    if not systems:
        return [0.0] * len(candidates)
    found = []
    for candidate in candidates:
        ranks = _ranks(candidate.metadata.get(RETRIEVED_BY_KEY, ""))
        discounts = [
            1 / math.log2(ranks[s] + 1) if ranks.get(s, cutoff + 1) <= cutoff else 0.0
            for s in systems
        ]
        mean = sum(discounts) / len(discounts)
        found.append(sum((d - mean) ** 2 for d in discounts) / len(discounts))
    return found


def _ranks(retrieved_by: str) -> dict[str, int]:
    ranks = {}
    for item in retrieved_by.split():
        system, _, rank = item.rpartition(":")
        if rank.isdigit():
            ranks[system] = int(rank)
    return ranks


def measure_cutoff(spec: study_pb2.StudySpec) -> int:
    """The rank cutoff of the study's first measure (what decides its ranking), else 10."""
    if not spec.measures:
        return _DEFAULT_CUTOFF
    return parse_measure(spec.measures[0]).cutoff or _DEFAULT_CUTOFF


@dataclass(frozen=True)
class ProbeAllowance:
    """What a query's probes may spend: calls, input tokens, USD (None: no limit)."""

    calls: int | None = None
    input_tokens: int | None = None
    cost_usd: float | None = None

    @property
    def limits(self) -> tuple[float | None, ...]:
        return (self.calls, self.input_tokens, self.cost_usd)


@dataclass
class ProbeTally:
    """The probes of one query: those answered (document -> grade), and what was asked."""

    grades: dict[str, int] = field(default_factory=dict)
    calls: int = 0
    failed: int = 0
    usage: list[JudgeUsage] = field(default_factory=list)


def _budget_of(usage: JudgeUsage) -> tuple[int, int, float]:
    return 1, usage.input_tokens, usage.cost_usd


class StudyGrading:
    """The pointwise side of studies: which providers grade, graders for a tenant, and the
    probes of a query."""

    def __init__(
        self,
        storage: VerdictCache,
        factory: JudgeFactory,
        accounts: ProviderAccounts,
        spending: SpendLedger,
    ) -> None:
        self._storage = storage
        self._factory = factory
        self._accounts = accounts
        self._spending = spending

    def grades(self, provider: str) -> bool:
        return self._factory.grades(provider)

    async def grader(self, tenant: str, spec: study_pb2.StudySpec) -> Grader:
        """The study's grader on the tenant's accounts; INVALID_ARGUMENT naming the labels'
        judge when it cannot be built."""
        return await build_grader(
            _GRADER_FIELD, spec.labels.pointwise.judge, self._factory, self._accounts, tenant
        )

    @staticmethod
    def reservation(
        grader: Grader, job: rank_pb2.JobSpec, count: int, share: rank_pb2.Budget | None
    ) -> ProbeAllowance:
        """What the `count` probes of a query's `job` may cost, held out of its `share` of the
        study's budget (None: the study has none): their worst case on its most expensive
        documents, at most MAX_PROBE_SHARE of each limit the share sets."""
        if share is None:
            return ProbeAllowance()
        worst = sorted(
            (grader.estimate(_request(job, passage_of(c))) for c in job.candidates),
            key=lambda usage: (usage.input_tokens, usage.cost_usd),
            reverse=True,
        )[:count]
        return ProbeAllowance(
            calls=min(count, int(share.max_judge_calls * MAX_PROBE_SHARE))
            if share.max_judge_calls
            else None,
            input_tokens=min(
                sum(u.input_tokens for u in worst), int(share.max_input_tokens * MAX_PROBE_SHARE)
            )
            if share.max_input_tokens
            else None,
            cost_usd=min(sum(u.cost_usd for u in worst), share.max_cost_usd * MAX_PROBE_SHARE)
            if share.max_cost_usd
            else None,
        )

    async def probe(
        self,
        grader: Grader,
        *,
        tenant: str,
        query_id: str,
        job: rank_pb2.JobSpec,
        order: Sequence[str],
        count: int,
        weights: Sequence[float],
        known: Mapping[str, int],
        allowed: ProbeAllowance,
        seed: int,
        deadline: float | None,
        may_ask: Callable[[], bool],
    ) -> ProbeTally:
        """Grade the planned documents of `order` (the query's documents, best first) that
        `known` does not grade already, within `allowed`, while `may_ask()` (a study being
        cancelled asks no more); a failed probe adds no grade."""
        passages = {c.id: passage_of(c) for c in job.candidates}
        planned = [order[p] for p in plan_probes(len(order), count, weights)]
        asked = [doc for doc in planned if doc not in known]
        grading = PairGrader(
            grader,
            self._storage,
            self._spending,
            tenant=tenant,
            rubric=job.rubric,
            seed=seed,
            max_in_flight=_PROBES_IN_FLIGHT,
            deadline=deadline,
        )
        tally = ProbeTally()
        held = [0.0, 0.0, 0.0]  # calls, tokens, cost: worst cases of the probes sent
        limits = allowed.limits

        def affordable(passage: Passage) -> bool:
            worst = _budget_of(grader.estimate(_request(job, passage)))
            over = (
                limit is not None and held[i] + worst[i] > limit for i, limit in enumerate(limits)
            )
            if any(over):
                return False
            for i, amount in enumerate(worst):
                held[i] += amount
            return True

        async def ask(doc: str) -> None:
            pair = Pair(query_id, job.query, passages[doc], _GRADER_FIELD)
            try:
                graded = await grading.grade(pair)
            except (InvalidInput, QuotaExceeded) as error:
                # The passage's own data, or the tenant's daily limit: this probe fails alone.
                log.warning("probe not asked", query=query_id, doc=doc, reason=str(error))
                tally.failed += 1
                return
            reply = graded.reply
            tally.calls += 1
            if not graded.cached:
                tally.usage.append(reply.usage)
            if reply.grade is None:
                tally.failed += 1
            else:
                tally.grades[doc] = reply.grade

        async with anyio.create_task_group() as probes:
            for doc in asked:
                if not may_ask() or not affordable(passages[doc]):
                    break
                probes.start_soon(ask, doc)
        return tally


def _request(job: rank_pb2.JobSpec, passage: Passage) -> GradeRequest:
    return GradeRequest(query=job.query, rubric=job.rubric, passage=passage)
