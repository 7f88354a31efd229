"""What a request asks for, as the scheduler's and the judges' own types: a job's spec as a
tournament's configuration and a pool, a judge's spec as a judge configuration. Fields a
request leaves unset take the API's defaults (tierank.limits)."""

from __future__ import annotations

from tierank import limits
from tierank.scheduler.types import Budget, TournamentConfig
from tierank.server.judges.base import JudgeConfig, Passage, PoolContext
from tierank.v1 import rank_pb2


def judge_config(judge: rank_pb2.JudgeSpec) -> JudgeConfig:
    params = judge.parameters

    def optional(name: str) -> object | None:
        return getattr(params, name) if params.HasField(name) else None

    return JudgeConfig(
        provider=judge.provider,
        model=judge.model,
        name=judge.name,
        weight=judge.weight or 1.0,
        temperature=optional("temperature"),  # type: ignore[arg-type]
        max_output_tokens=optional("max_output_tokens"),  # type: ignore[arg-type]
        reasoning=optional("reasoning"),  # type: ignore[arg-type]
        timeout_s=optional("timeout_seconds"),  # type: ignore[arg-type]
        passage_token_budget=optional("passage_token_budget"),  # type: ignore[arg-type]
        options=dict(params.options),
    )


def passage_of(candidate: rank_pb2.Candidate) -> Passage:
    return Passage(candidate.id, candidate.text, dict(candidate.metadata))


def pool_context(spec: rank_pb2.JobSpec) -> PoolContext:
    return PoolContext(
        query=spec.query,
        rubric=spec.rubric,
        passages=tuple(passage_of(c) for c in spec.candidates),
        seed=spec.seed,
    )


def tournament_config(spec: rank_pb2.JobSpec) -> TournamentConfig:
    judges = [judge_config(j) for j in spec.judges]
    adaptive = spec.ensemble_mode == rank_pb2.ENSEMBLE_MODE_ADAPTIVE
    return TournamentConfig(
        batch_size=spec.batch_size if spec.HasField("batch_size") else limits.DEFAULT_BATCH_SIZE,
        top_k=spec.top_k,
        max_in_flight=spec.max_in_flight
        if spec.HasField("max_in_flight")
        else limits.DEFAULT_JOB_MAX_IN_FLIGHT,
        judge_weights=tuple(j.weight for j in judges),
        ensemble="adaptive" if adaptive else "all",
        quorum=spec.quorum if spec.HasField("quorum") else min(limits.DEFAULT_QUORUM, len(judges)),
        budget=Budget(
            max_calls=spec.budget.max_judge_calls,
            max_input_tokens=spec.budget.max_input_tokens,
            max_cost_usd=spec.budget.max_cost_usd,
        ),
        seed=spec.seed,
    )
