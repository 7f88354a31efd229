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
from dataclasses import dataclass, field

from tierank.server.judges.base import (
    ConfiguredJudge,
    FailureKind,
    JudgeConfig,
    JudgeFailure,
    JudgeUsage,
    Passage,
)
from tierank.server.judges.llm import LLMJudge
from tierank.server.judges.offline import ORACLE_NOISE, estimate_tokens
from tierank.server.judges.options import float_option, refuse_unknown_options
from tierank.server.judges.pointwise import (
    ANSWER_TOKENS,
    GRADE_SCHEMA,
    MAX_GRADE,
    MIN_GRADE,
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


class OracleGrader(Grader):
    """Grade = round(metadata[score_key] + N(0, noise²)), clamped to 0–3.

    Options as the listwise oracle: `score_key` (default "score"), `noise` (default
    ORACLE_NOISE); not its call simulations (`latency_ms`, `fail_rate`, `profile`).
    Not cached: fresh noise per call is the point, as for the listwise oracle.
    """

    def __init__(self, config: JudgeConfig) -> None:
        super().__init__(config)
        refuse_unknown_options(config.options, frozenset({"score_key", "noise"}), "oracle")
        self._score_key = config.options.get("score_key", "score")
        self._noise = float_option(config.options, "noise", ORACLE_NOISE)

    @property
    def cacheable(self) -> bool:
        return False

    def cache_identity(self) -> str:
        return json.dumps(
            {"provider": "oracle", "score_key": self._score_key, "noise": self._noise},
            sort_keys=True,
        )

    def estimate(self, request: GradeRequest) -> JudgeUsage:
        return JudgeUsage(
            input_tokens=estimate_tokens(request.query) + estimate_tokens(request.passage.text)
        )

    async def grade(self, request: GradeRequest) -> GradeReply:
        usage = self.estimate(request)
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
        noisy = score + random.Random(request.seed).gauss(0.0, self._noise)
        # Clamped before rounding: a huge `noise` can make `noisy` infinite.
        return GradeReply(round(min(MAX_GRADE, max(MIN_GRADE, noisy))), usage)
