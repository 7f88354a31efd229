"""Validation of job specs at the API edge: every rule broken is reported, by field."""

from __future__ import annotations

import math
from collections.abc import Callable

from tierank.limits import (
    MAX_BATCH_SIZE,
    MAX_CANDIDATES,
    MAX_DEADLINE_SECONDS,
    MAX_ID_BYTES,
    MAX_IN_FLIGHT,
    MAX_JUDGE_NAME_BYTES,
    MAX_JUDGE_OPTIONS,
    MAX_JUDGES,
    MAX_MODEL_BYTES,
    MAX_OPTION_KEY_BYTES,
    MAX_OPTION_VALUE_BYTES,
    MAX_QUERY_BYTES,
    MAX_REQUEST_ID_BYTES,
    MAX_RUBRIC_BYTES,
    MAX_TEMPERATURE,
    MAX_WEIGHT,
    MIN_BATCH_SIZE,
    MIN_CANDIDATES,
    MIN_TEMPERATURE,
    MIN_WEIGHT,
)
from tierank.server.errors import (
    MAX_ERROR_TEXT_BYTES,
    NUL,
    NUL_RULE,
    FieldViolation,
    metadata_nul_violations,
    shown,
)
from tierank.server.judges.rubric_presets import LISTWISE, UnknownPreset, find_preset
from tierank.server.wire.specs import judge_config
from tierank.v1 import rank_pb2

# What the server adds to a job's spec over its life: its name, times, state, an error message,
# and per judge one stats entry (with the judge's last error, which the runner keeps short).
_JOB_OVERHEAD_BYTES = 4 * 1024
_JUDGE_STATS_BYTES = MAX_JUDGE_NAME_BYTES + MAX_ERROR_TEXT_BYTES + 256
# Per candidate in the tiers: the id's tag and length, and at worst a tier of its own.
_TIER_OVERHEAD_BYTES = 16

_ENSEMBLE_MODES = frozenset(rank_pb2.EnsembleMode.values())


def validate_spec(
    spec: rank_pb2.JobSpec, knows_provider: Callable[[str], bool]
) -> list[FieldViolation]:
    violations: list[FieldViolation] = []

    def bad(field: str, rule: str) -> None:
        violations.append(FieldViolation(f"spec.{field}", rule))

    if not spec.query.strip():
        bad("query", "must not be empty")
    _check_bytes("query", spec.query, MAX_QUERY_BYTES, bad)
    _check_bytes("rubric", spec.rubric, MAX_RUBRIC_BYTES, bad)
    for field, text in (("query", spec.query), ("rubric", spec.rubric)):
        if NUL in text:
            bad(field, NUL_RULE)
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
    violations.extend(budget_violations(spec.budget, "spec.budget"))
    if bad_deadline(spec.deadline_seconds):
        bad("deadline_seconds", DEADLINE_RULE)
    if spec.ensemble_mode not in _ENSEMBLE_MODES:
        bad("ensemble_mode", f"unknown value {spec.ensemble_mode}")
    return violations


def validate_request_id(request_id: str) -> list[FieldViolation]:
    """The rules of `request_id`, the same for every RPC that creates something."""
    violations = []
    if len(request_id.encode()) > MAX_REQUEST_ID_BYTES:
        violations.append(
            FieldViolation("request_id", f"must be at most {MAX_REQUEST_ID_BYTES} bytes")
        )
    if NUL in request_id:
        violations.append(FieldViolation("request_id", NUL_RULE))
    return violations


def resolve_preset(spec: rank_pb2.JobSpec) -> list[FieldViolation]:
    """Replace a rubric that names a preset (`preset:NAME[@VERSION]`) by the preset's text, so
    that what is measured, stored, prompted and cached is the text itself; the violation when
    it names no known preset."""
    try:
        preset = find_preset(spec.rubric, LISTWISE)
    except UnknownPreset as unknown:
        return [FieldViolation("spec.rubric", unknown.rule)]
    if preset is not None:
        spec.rubric = preset.text
    return []


def validate_size(spec: rank_pb2.JobSpec, max_message_bytes: int) -> list[FieldViolation]:
    """A job is refused when its largest response (the FULL view once every candidate has a
    tier and every judge stats) would not fit in the server's message limit."""
    projected = projected_job_bytes(spec)
    if projected <= max_message_bytes:
        return []
    return [
        FieldViolation(
            "spec",
            f"this job would grow to about {projected} bytes with its tiers and stats, more than "
            f"this server's limit of {max_message_bytes} bytes; send fewer or shorter "
            "candidates, or have the operator raise --max-message-mb (TIERANK_MAX_MESSAGE_MB)",
        )
    ]


def projected_job_bytes(spec: rank_pb2.JobSpec) -> int:
    """An upper bound on the serialized size of the job in its FULL view, at any point."""
    ids = sum(len(c.id.encode()) + _TIER_OVERHEAD_BYTES for c in spec.candidates)
    judges = len(spec.judges) * _JUDGE_STATS_BYTES
    query = len(spec.query.encode())  # the job repeats it outside its spec
    return spec.ByteSize() + ids + judges + query + _JOB_OVERHEAD_BYTES


# The deadline's rule, the same for a job, a study and a study's next round.
DEADLINE_RULE = (
    f"must be between 0 and {MAX_DEADLINE_SECONDS:,} seconds"
    f" ({MAX_DEADLINE_SECONDS // 86_400} days; 0 means no deadline)"
)


_BUDGET_LIMITS = ("max_judge_calls", "max_input_tokens", "max_cost_usd")
_BUDGET_RULE = "must be a finite number, not negative (0 means unlimited)"


def budget_violations(budget: rank_pb2.Budget, field: str) -> list[FieldViolation]:
    """The rule of every limit of a Budget, wherever one is sent (a job's, a study's, an
    extension's): `field` is where it stands in the request."""
    return [
        FieldViolation(f"{field}.{name}", _BUDGET_RULE)
        for name in _BUDGET_LIMITS
        if getattr(budget, name) < 0 or not math.isfinite(getattr(budget, name))
    ]


def bad_deadline(seconds: float) -> bool:
    return not 0 <= seconds <= MAX_DEADLINE_SECONDS  # NaN too


def _check_bytes(field: str, value: str, limit: int, bad: Callable[[str, str], None]) -> None:
    size = len(value.encode())
    if size > limit:
        bad(field, f"must be at most {limit} bytes in UTF-8, got {size}")


def _validate_candidates(spec: rank_pb2.JobSpec, bad: Callable[[str, str], None]) -> None:
    count = len(spec.candidates)
    if count < MIN_CANDIDATES:
        bad("candidates", f"must hold at least {MIN_CANDIDATES} candidates, got {count}")
    if count > MAX_CANDIDATES:
        bad("candidates", f"must hold at most {MAX_CANDIDATES} candidates, got {count}")
        return
    first_index: dict[str, int] = {}
    for i, candidate in enumerate(spec.candidates):
        if not candidate.id:
            bad(f"candidates[{i}].id", "must not be empty")
        elif len(candidate.id.encode()) > MAX_ID_BYTES:
            bad(f"candidates[{i}].id", f"must be at most {MAX_ID_BYTES} bytes in UTF-8")
        elif candidate.id in first_index:
            bad(f"candidates[{i}].id", f"duplicates candidates[{first_index[candidate.id]}].id")
        else:
            first_index[candidate.id] = i
        if not candidate.text.strip():
            bad(f"candidates[{i}].text", "must not be empty")
        elif NUL in candidate.text:
            bad(f"candidates[{i}].text", NUL_RULE)
        for violation in metadata_nul_violations(f"candidates[{i}].metadata", candidate.metadata):
            bad(violation.field, violation.rule)


def _validate_judges(
    spec: rank_pb2.JobSpec, knows_provider: Callable[[str], bool], bad: Callable[[str, str], None]
) -> None:
    if not spec.judges:
        bad("judges", "must name at least one judge")
    if len(spec.judges) > MAX_JUDGES:
        bad("judges", f"must name at most {MAX_JUDGES} judges, got {len(spec.judges)}")
        return
    names: dict[str, int] = {}
    for i, judge in enumerate(spec.judges):
        field = f"judges[{i}]"
        if not knows_provider(judge.provider):
            bad(f"{field}.provider", f"unknown provider {shown(judge.provider)}")
        if judge.weight != 0 and not MIN_WEIGHT <= judge.weight <= MAX_WEIGHT:
            bad(f"{field}.weight", f"must be between {MIN_WEIGHT:g} and {MAX_WEIGHT:g} (0 means 1)")
        if judge.weight_from_qualification and judge.weight != 0:
            bad(f"{field}.weight", "must be 0 (unset) when weight_from_qualification is set")
        _check_bytes(f"{field}.model", judge.model, MAX_MODEL_BYTES, bad)
        _check_bytes(f"{field}.name", judge.name, MAX_JUDGE_NAME_BYTES, bad)
        for part, value in (("model", judge.model), ("name", judge.name)):
            if NUL in value:
                bad(f"{field}.{part}", NUL_RULE)
        name = judge_config(judge).display_name
        if name in names:
            bad(f"{field}.name", f"duplicates the name of judges[{names[name]}] ({shown(name)})")
        names.setdefault(name, i)
        _validate_parameters(f"{field}.parameters", judge.parameters, bad)


def _validate_parameters(
    field: str, params: rank_pb2.JudgeParameters, bad: Callable[[str, str], None]
) -> None:
    if params.HasField("temperature") and not (
        MIN_TEMPERATURE <= params.temperature <= MAX_TEMPERATURE
    ):
        bad(f"{field}.temperature", f"must be between {MIN_TEMPERATURE:g} and {MAX_TEMPERATURE:g}")
    for positive in ("max_output_tokens", "passage_token_budget"):
        if params.HasField(positive) and not getattr(params, positive) > 0:
            bad(f"{field}.{positive}", "must be positive")
    if params.HasField("timeout_seconds") and not 0 < params.timeout_seconds < math.inf:
        bad(f"{field}.timeout_seconds", "must be positive and finite")
    if len(params.options) > MAX_JUDGE_OPTIONS:
        bad(f"{field}.options", f"must hold at most {MAX_JUDGE_OPTIONS} options")
        return
    for key, value in params.options.items():
        if len(key.encode()) > MAX_OPTION_KEY_BYTES:
            bad(f"{field}.options", f"option names must be at most {MAX_OPTION_KEY_BYTES} bytes")
        if len(value.encode()) > MAX_OPTION_VALUE_BYTES:
            bad(
                f"{field}.options[{shown(key)}]",
                f"must be at most {MAX_OPTION_VALUE_BYTES} bytes in UTF-8",
            )
