"""Validation of job specs at the API edge: every rule broken is reported, by field."""

from __future__ import annotations

import math
from collections.abc import Callable

from tierank.server.convert import judge_config
from tierank.server.errors import FieldViolation
from tierank.v1 import rank_pb2

MAX_CANDIDATES = 10_000
MAX_BATCH_SIZE = 20
MIN_BATCH_SIZE = 2
MAX_IN_FLIGHT = 64


def validate_spec(
    spec: rank_pb2.JobSpec, knows_provider: Callable[[str], bool]
) -> list[FieldViolation]:
    violations: list[FieldViolation] = []

    def bad(field: str, rule: str) -> None:
        violations.append(FieldViolation(f"spec.{field}", rule))

    if not spec.query.strip():
        bad("query", "must not be empty")
    _validate_candidates(spec, bad)
    _validate_judges(spec, knows_provider, bad)

    if spec.HasField("batch_size") and not MIN_BATCH_SIZE <= spec.batch_size <= MAX_BATCH_SIZE:
        bad("batch_size", f"must be between {MIN_BATCH_SIZE} and {MAX_BATCH_SIZE}")
    if spec.top_k < 0:
        bad("top_k", "must not be negative (0 means a full ordering)")
    elif spec.top_k > len(spec.candidates):
        bad("top_k", f"must not exceed the number of candidates ({len(spec.candidates)})")
    if spec.HasField("max_in_flight") and not 1 <= spec.max_in_flight <= MAX_IN_FLIGHT:
        bad("max_in_flight", f"must be between 1 and {MAX_IN_FLIGHT}")
    if spec.HasField("quorum") and not 1 <= spec.quorum <= max(1, len(spec.judges)):
        bad("quorum", "must be between 1 and the number of judges")
    for name in ("max_judge_calls", "max_input_tokens", "max_cost_usd"):
        value = getattr(spec.budget, name)
        if value < 0 or (isinstance(value, float) and math.isnan(value)):
            bad(f"budget.{name}", "must not be negative (0 means unlimited)")
    if spec.deadline_seconds < 0 or math.isnan(spec.deadline_seconds):
        bad("deadline_seconds", "must not be negative (0 means no deadline)")
    return violations


def _validate_candidates(spec: rank_pb2.JobSpec, bad: Callable[[str, str], None]) -> None:
    count = len(spec.candidates)
    if count < 2:
        bad("candidates", f"must hold at least 2 candidates, got {count}")
    if count > MAX_CANDIDATES:
        bad("candidates", f"must hold at most {MAX_CANDIDATES} candidates, got {count}")
        return
    first_index: dict[str, int] = {}
    for i, candidate in enumerate(spec.candidates):
        if not candidate.id:
            bad(f"candidates[{i}].id", "must not be empty")
        elif candidate.id in first_index:
            bad(f"candidates[{i}].id", f"duplicates candidates[{first_index[candidate.id]}].id")
        else:
            first_index[candidate.id] = i
        if not candidate.text.strip():
            bad(f"candidates[{i}].text", "must not be empty")


def _validate_judges(
    spec: rank_pb2.JobSpec, knows_provider: Callable[[str], bool], bad: Callable[[str, str], None]
) -> None:
    if not spec.judges:
        bad("judges", "must name at least one judge")
    names: dict[str, int] = {}
    for i, judge in enumerate(spec.judges):
        field = f"judges[{i}]"
        if not knows_provider(judge.provider):
            bad(f"{field}.provider", f"unknown provider {judge.provider!r}")
        if judge.weight < 0 or math.isnan(judge.weight):
            bad(f"{field}.weight", "must not be negative (0 means 1)")
        name = judge_config(judge).display_name
        if name in names:
            bad(f"{field}.name", f"duplicates the name of judges[{names[name]}] ({name!r})")
        names.setdefault(name, i)
        params = judge.parameters
        if params.HasField("temperature") and not 0 <= params.temperature <= 2:
            bad(f"{field}.parameters.temperature", "must be between 0 and 2")
        for positive in ("max_output_tokens", "timeout_seconds", "passage_token_budget"):
            if params.HasField(positive) and not getattr(params, positive) > 0:
                bad(f"{field}.parameters.{positive}", "must be positive")
