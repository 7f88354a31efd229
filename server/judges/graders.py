"""Pointwise graders: one (query, passage) pair in, one grade 0–3 out.

`LLMGrader` asks an LLM judge's provider through that judge's own call path (limits, retries,
breaker, usage, corrective follow-up: `LLMJudge.exchange`) with the pointwise prompt, so
listwise and pointwise judging share one client, one limiter and one breaker per provider.
`OracleGrader` is the offline one: a hidden metadata score plus Gaussian noise, rounded and
clamped to 0–3. Like the listwise judges, graders return failures instead of raising.
"""

from __future__ import annotations

import abc
import json
import math
import random
from dataclasses import dataclass, field, replace

import anyio

from tierank.limits import MAX_GRADE, MIN_GRADE
from tierank.server.judges.base import (
    ConfiguredJudge,
    FailureKind,
    JudgeConfig,
    JudgeFailure,
    JudgeUsage,
    Passage,
)
from tierank.server.judges.llm import LLMJudge
from tierank.server.judges.offline import ORACLE_NOISE, OracleJudge, estimate_tokens, profile_named
from tierank.server.judges.options import float_option, refuse_unknown_options
from tierank.server.judges.pointwise import (
    ANSWER_TOKENS,
    GRADE_SCHEMA,
    POINTWISE_TEMPLATE_VERSION,
    corrective_grade_message,
    parse_grade,
    render_grade_prompt,
)
from tierank.server.judges.prompt import AnswerFormat, PromptParts


@dataclass(frozen=True)
class GradeRequest:
    query: str
    rubric: str
    passage: Passage
    seed: int = 0
    # Absolute deadline on the `time.monotonic()` clock; None means no deadline.
    deadline: float | None = None


@dataclass(frozen=True)
class GradeReply:
    grade: int | None
    usage: JudgeUsage = field(default_factory=JudgeUsage)
    failure: JudgeFailure | None = None
    prompt: str = ""
    raw_text: str = ""


class UngradablePassage(ValueError):
    """A passage whose own data a grader cannot compute with (an oracle score of inf):
    the request's fault, not the provider's."""


class Grader(ConfiguredJudge):
    """A pointwise judge: grades one (query, passage) pair on 0-3."""

    @abc.abstractmethod
    def estimate(self, request: GradeRequest) -> JudgeUsage:
        """An upper estimate of a call's usage, reserved against the tenant's budget first."""

    @abc.abstractmethod
    async def grade(self, request: GradeRequest) -> GradeReply:
        """Grade one pair. Returns a failed reply instead of raising on provider errors."""


class LLMGrader(Grader):
    def __init__(self, judge: LLMJudge) -> None:
        super().__init__(judge.config)
        self._judge = judge

    @property
    def cacheable(self) -> bool:
        return self._judge.cacheable

    def cache_identity(self) -> str:
        return self._judge.identity(POINTWISE_TEMPLATE_VERSION)

    async def prepare(self, *, patient: bool = False) -> None:
        await self._judge.prepare(patient=patient)

    def _prompt(self, request: GradeRequest) -> PromptParts:
        judge = self._judge
        return render_grade_prompt(
            request.query,
            request.rubric,
            request.passage.text,
            judge.answer_format,
            judge.passage_token_budget,
        )

    def estimate(self, request: GradeRequest) -> JudgeUsage:
        judge = self._judge
        prompt = self._prompt(request)
        return judge.worst_case(
            prompt.text,
            judge.output_allowance(ANSWER_TOKENS),
            corrective_grade_message("x" * 200, judge.answer_format),
            cache_writes=judge.cache_write_bound(prompt),
        )

    async def grade(self, request: GradeRequest) -> GradeReply:
        judge = self._judge
        answer_format = judge.answer_format
        exchange = await judge.exchange(
            self._prompt(request),
            read=parse_grade,
            corrective=lambda reason: corrective_grade_message(reason, answer_format),
            max_output_tokens=judge.output_allowance(ANSWER_TOKENS),
            schema=GRADE_SCHEMA if answer_format is AnswerFormat.JSON else None,
            seed=request.seed,
            deadline=request.deadline,
        )
        grade = exchange.answer.value if exchange.answer else None
        return GradeReply(
            grade, exchange.usage, exchange.failure, exchange.prompt, exchange.raw_text
        )


# The oracle grader's `bias` at most, either way: a whole scale's width.
MAX_BIAS = float(MAX_GRADE - MIN_GRADE)


class OracleGrader(Grader):
    """Grade = round(metadata[score_key] + N(0, noise²)), clamped to 0–3.

    Options as the listwise oracle's: `score_key` (default "score"), `noise` (default
    ORACLE_NOISE), `bias` (added to every score: a grader that grades too high, or too low,
    as LLM graders often do; default 0), `latency_ms` (each grade takes this long),
    `fail_rate` (share of calls answered unreadably) and `profile`, which shapes only the
    listwise oracle's answers (a study derives its grader from its judge, options and all).
    Not cached: fresh noise per call is the point, as for the listwise oracle.
    """

    def __init__(self, config: JudgeConfig) -> None:
        super().__init__(config)
        refuse_unknown_options(config.options, OracleJudge.known_options, "oracle")
        options = config.options
        self._score_key = options.get("score_key", "score")
        self._noise = float_option(options, "noise", ORACLE_NOISE)
        self._bias = float_option(options, "bias", 0.0, MAX_BIAS, lowest=-MAX_BIAS)
        self._latency_s = (
            float_option(options, "latency_ms", 0.0, OracleJudge.MAX_LATENCY_MS) / 1000
        )
        self._fail_rate = float_option(options, "fail_rate", 0.0, 1.0)
        if "profile" in options:
            profile_named(options)  # an unknown profile is refused as by the listwise oracle

    @property
    def cacheable(self) -> bool:
        return False

    def cache_identity(self) -> str:
        identity = {"provider": "oracle", "score_key": self._score_key, "noise": self._noise}
        if self._bias:
            identity["bias"] = self._bias
        return json.dumps(identity, sort_keys=True)

    def estimate(self, request: GradeRequest) -> JudgeUsage:
        return JudgeUsage(
            input_tokens=estimate_tokens(request.query) + estimate_tokens(request.passage.text)
        )

    async def grade(self, request: GradeRequest) -> GradeReply:
        usage = replace(self.estimate(request), latency_s=self._latency_s)
        if self._latency_s:
            await anyio.sleep(self._latency_s)
        raw = request.passage.metadata.get(self._score_key)
        try:
            score = float(raw)  # type: ignore[arg-type]
        except (TypeError, ValueError):
            message = f"passage {request.passage.id!r} has no numeric metadata[{self._score_key!r}]"
            return GradeReply(None, usage, JudgeFailure(FailureKind.CLIENT_ERROR, message))
        if not math.isfinite(score):
            raise UngradablePassage(
                f"passage {request.passage.id!r} cannot be graded: its "
                f"metadata[{self._score_key!r}] is {raw!r}, not a finite number"
            )
        rng = random.Random(request.seed)
        if self._fail_rate and rng.random() < self._fail_rate:
            failure = JudgeFailure(FailureKind.UNPARSEABLE, "oracle simulated a bad answer")
            return GradeReply(None, usage, failure)
        noisy = score + self._bias + rng.gauss(0.0, self._noise)
        # Clamped before rounding: a huge `noise` can make `noisy` infinite.
        return GradeReply(round(min(MAX_GRADE, max(MIN_GRADE, noisy))), usage)
