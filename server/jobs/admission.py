"""Judges admitted on evidence: each job judge is looked up among its tenant's qualifications
(QualifyJudge) by its identity. The latest one decides: a judge found no better than chance is
refused unless the job insists (`allow_unqualified_judges`), and a judge asking for
`weight_from_qualification` votes with the weight its pair accuracy earned. The job's stored
spec names the qualification each judge was admitted by."""

from __future__ import annotations

from collections.abc import Sequence

from tierank.server.errors import FieldViolation, InvalidInput, PreconditionFailed
from tierank.server.judges.base import Judge
from tierank.server.names import qualification_name
from tierank.server.storage.base import QualificationRecord, QualificationStore
from tierank.v1 import rank_pb2


async def admit(
    spec: rank_pb2.JobSpec, judges: Sequence[Judge], tenant: str, storage: QualificationStore
) -> None:
    """Fill in the judges' `qualification` (and weight where asked) in `spec`, or raise.
    `judges` are the job's, built from `spec` (prepared here, as the runner would anyway)."""
    violations: list[FieldViolation] = []
    at_chance: list[str] = []
    for i, (judge, built) in enumerate(zip(spec.judges, judges, strict=True)):
        judge.ClearField("qualification")  # output only: never what a client says
        await built.prepare()
        record = await _latest_qualification(storage, tenant, built.qualification_identities())
        field = f"spec.judges[{i}]"
        if record is None:
            if judge.weight_from_qualification:
                violations.append(
                    FieldViolation(
                        f"{field}.weight_from_qualification",
                        f"this tenant has no qualification of {built.judge_identity()}: run "
                        "`tierank qualify` with this judge first",
                    )
                )
            continue
        judge.qualification = qualification_name(record.qualification_id)
        if not record.usable:
            at_chance.append(f"{field} ({record.judge_identity}, {judge.qualification})")
        elif judge.weight_from_qualification:
            judge.weight = record.weight
    if violations:
        raise InvalidInput(violations)
    if at_chance and not spec.allow_unqualified_judges:
        raise PreconditionFailed(
            f"judges qualified as no better than chance: {'; '.join(at_chance)}. Qualify them "
            "again, drop them, or set allow_unqualified_judges (tierank rank "
            "--allow-unqualified-judges) to use them anyway",
            "JUDGE_NOT_QUALIFIED",
        )


async def _latest_qualification(
    storage: QualificationStore, tenant: str, identities: Sequence[str]
) -> QualificationRecord | None:
    """The latest qualification under the first of `identities` that has one: the judge's
    identity before the earlier spellings of it that older qualifications are stored under."""
    for identity in identities:
        found = await storage.list_qualifications(tenant, identity, 1)
        if found:
            return found[0]
    return None


def as_requested(spec: rank_pb2.JobSpec) -> rank_pb2.JobSpec:
    """`spec` without what admission filled in, to compare a stored job with a request."""
    requested = rank_pb2.JobSpec()
    requested.CopyFrom(spec)
    for judge in requested.judges:
        judge.ClearField("qualification")
        if judge.weight_from_qualification:
            judge.ClearField("weight")
    return requested
