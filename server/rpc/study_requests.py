"""Validation of a StudySpec at the API edge: every rule broken is reported, by field."""

from __future__ import annotations

import math
from collections.abc import Callable

from tierank.evaluation import MeasureError, parse_measure
from tierank.limits import (
    MAX_DISPLAY_NAME_BYTES,
    MAX_LIVE_QUERIES,
    MAX_STUDY_DEPTH,
    MAX_STUDY_MEASURES,
)
from tierank.server.errors import FieldViolation, InvalidInput, shown
from tierank.server.judges.llm import BATCH_MODE, MODE_OPTION
from tierank.server.judges.providers import BATCH_PROVIDERS, no_batch_api
from tierank.server.labeling import fixed_mapping
from tierank.server.rpc.validation import (
    DEADLINE_RULE,
    bad_deadline,
    budget_violations,
    resolve_preset,
    validate_request_id,
    validate_spec,
)
from tierank.server.studies.driver import in_batch_mode
from tierank.server.studies.grading import default_mapping
from tierank.v1 import eval_pb2, rank_pb2, study_pb2

# The ranking parameters are checked as a job's, on a stand-in query and pool.
_PROBE_QUERY = "study"


def probe_job(spec: study_pb2.StudySpec) -> rank_pb2.JobSpec:
    """A job of the study's ranking parameters, as the study makes its queries' jobs (their
    judges in batch mode in a provider_batch study), on a stand-in query and pool."""
    probe = rank_pb2.JobSpec()
    probe.CopyFrom(spec.ranking)
    probe.query = _PROBE_QUERY
    for i in range(max(2, spec.ranking.top_k)):
        probe.candidates.add(id=f"d{i}", text="passage")
    if spec.provider_batch:
        in_batch_mode(probe)
    return probe


def _limit_violations(
    budget: rank_pb2.Budget, deadline_seconds: float, prefix: str
) -> list[FieldViolation]:
    violations = budget_violations(budget, f"{prefix}budget")
    if bad_deadline(deadline_seconds):
        violations.append(FieldViolation(f"{prefix}deadline_seconds", DEADLINE_RULE))
    return violations


def validate_extension(request: study_pb2.ExtendStudyRequest) -> list[FieldViolation]:
    """Every rule an ExtendStudy request breaks."""
    return validate_request_id(request.request_id) + _limit_violations(
        request.budget, request.deadline_seconds, ""
    )


def resolve_labels(spec: study_pb2.StudySpec, grades: Callable[[str], bool]) -> None:
    """A study that names no labels gets pointwise labels from its first judge that can grade
    (default_mapping), else rank bands (the mapping left unset)."""
    if spec.labels.WhichOneof("mapping") is None:
        mapping = default_mapping(spec, grades)
        if mapping is not None:
            spec.labels.CopyFrom(mapping)


def _pointwise_violations(
    anchoring: eval_pb2.PointwiseAnchoring,
    knows_provider: Callable[[str], bool],
    grades: Callable[[str], bool],
) -> list[FieldViolation]:
    field = "spec.labels.pointwise"
    violations = []
    rate = anchoring.probe_rate
    if not (math.isfinite(rate) and 0 <= rate <= 1):
        violations.append(
            FieldViolation(f"{field}.probe_rate", "must be a number above 0, at most 1 (0: 0.25)")
        )
    provider = anchoring.judge.provider
    if not provider:
        violations.append(FieldViolation(f"{field}.judge.provider", "must name the grader"))
    elif not knows_provider(provider):
        violations.append(FieldViolation(f"{field}.judge.provider", f"unknown {shown(provider)}"))
    elif not grades(provider):
        violations.append(
            FieldViolation(
                f"{field}.judge.provider",
                f"{shown(provider)} cannot grade pairs pointwise: name an LLM provider or the"
                " oracle, or label with rank bands",
            )
        )
    return violations


def validate_study_spec(
    spec: study_pb2.StudySpec,
    knows_provider: Callable[[str], bool],
    grades: Callable[[str], bool],
) -> list[FieldViolation]:
    """Every rule `spec` breaks; resolves a preset rubric in place (as a job's)."""
    violations: list[FieldViolation] = []

    def bad(field: str, rule: str) -> None:
        violations.append(FieldViolation(f"spec.{field}", rule))

    if len(spec.display_name.encode()) > MAX_DISPLAY_NAME_BYTES or "\0" in spec.display_name:
        bad("display_name", f"must be at most {MAX_DISPLAY_NAME_BYTES} bytes, without NUL")
    if spec.depth and not 1 <= spec.depth <= MAX_STUDY_DEPTH:
        bad("depth", f"must be between 1 and {MAX_STUDY_DEPTH} (0: the default)")
    if spec.max_live_queries and not 1 <= spec.max_live_queries <= MAX_LIVE_QUERIES:
        bad("max_live_queries", f"must be between 1 and {MAX_LIVE_QUERIES} (0: the default)")
    violations.extend(_limit_violations(spec.budget, spec.deadline_seconds, "spec."))
    if len(spec.measures) > MAX_STUDY_MEASURES:
        bad("measures", f"at most {MAX_STUDY_MEASURES}")
    for i, measure in enumerate(spec.measures):
        try:
            parse_measure(measure)
        except MeasureError as error:
            bad(f"measures[{i}]", str(error))
    if spec.labels.WhichOneof("mapping") == "pointwise":
        violations.extend(_pointwise_violations(spec.labels.pointwise, knows_provider, grades))
    else:
        try:
            fixed_mapping("spec.labels", spec.labels)
        except InvalidInput as invalid:
            violations.extend(invalid.violations)
    ranking = spec.ranking
    # An empty budget message is no budget: clients in some languages always send one.
    for name in ("query", "candidates", "deadline_seconds"):
        if getattr(ranking, name):
            bad(f"ranking.{name}", "must be empty: the study sets it for each query")
    if ranking.budget.ByteSize():
        bad("ranking.budget", "must be empty: set the study's own budget (spec.budget)")
    own = resolve_preset(ranking) + validate_spec(probe_job(spec), knows_provider)
    violations.extend(
        FieldViolation(v.field.replace("spec.", "spec.ranking.", 1), v.rule) for v in own
    )
    if spec.provider_batch:
        violations.extend(_batch_violations(ranking, knows_provider))
    return violations


def _batch_violations(
    ranking: rank_pb2.JobSpec, knows_provider: Callable[[str], bool]
) -> list[FieldViolation]:
    """What keeps a provider_batch study's judges out of batch mode (an unknown provider is
    reported as such already)."""
    violations = []
    for i, judge in enumerate(ranking.judges):
        field = f"spec.ranking.judges[{i}]"
        if knows_provider(judge.provider) and judge.provider not in BATCH_PROVIDERS:
            violations.append(
                FieldViolation(
                    f"{field}.provider",
                    f"{no_batch_api(shown(judge.provider))}: every judge of a provider_batch"
                    " study must have one",
                )
            )
        mode = judge.parameters.options.get(MODE_OPTION, "")
        if mode not in ("", BATCH_MODE):
            violations.append(
                FieldViolation(
                    f"{field}.parameters.options.{MODE_OPTION}",
                    f"is {shown(mode)}, but a provider_batch study runs every judge in batch mode"
                    f" ({MODE_OPTION}={BATCH_MODE}, or leave it unset)",
                )
            )
    return violations
