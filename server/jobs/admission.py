"""Judges admitted on evidence: each job judge is looked up among its tenant's qualifications
(QualifyJudge), matched as the same judge (judges/identity.py: the same model asked the same
way, whatever the options that do not make another judge). The latest one decides: a judge
found no better than chance is refused unless the job insists (`allow_unqualified_judges`),
and a judge asking for `weight_from_qualification` votes with the weight its pair accuracy
earned. The job's stored spec names the qualification each judge was admitted by, and says how
it was admitted when there is more to say (`admitted_unqualified`, `admission_note`).

A judge whose identity cannot be established (a self-hosted server's model list could not be
read, even waiting as long as a call may) is not a new judge: it is refused when some judge
found no better than chance at the same endpoint, asked the same way, cannot be ruled out.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from tierank.server.errors import FieldViolation, InvalidInput, PreconditionFailed
from tierank.server.judges.base import Judge
from tierank.server.judges.identity import JudgeKey, judge_key
from tierank.server.names import qualification_name
from tierank.server.storage.base import QualificationRecord, QualificationStore
from tierank.v1 import eval_pb2, rank_pb2

# Every qualification of the tenant is read to match a job's judges (a tenant keeps tens of
# them): a limit here would let a judge refused long ago through.
_ALL_QUALIFICATIONS = 2**62


@dataclass(frozen=True)
class _Stored:
    """One of the tenant's qualifications, with what its identity says (newest first)."""

    record: QualificationRecord
    key: JudgeKey
    verdict: str

    @property
    def name(self) -> str:
        return qualification_name(self.record.qualification_id)

    @property
    def usable(self) -> bool:
        return self.record.usable


@dataclass(frozen=True)
class _Decision:
    # The qualification that decides; None: the judge is new.
    decided_by: _Stored | None = None
    refused: bool = False
    # Why, for the refusal message and the admission note.
    why: str = ""


async def admit(
    spec: rank_pb2.JobSpec, judges: Sequence[Judge], tenant: str, storage: QualificationStore
) -> None:
    """Fill in the judges' `qualification`, admission fields (and weight where asked) in `spec`,
    or raise. `judges` are the job's, built from `spec` (prepared here, as the runner would)."""
    violations: list[FieldViolation] = []
    refusals: list[str] = []
    stored = await _read_qualifications(storage, tenant)
    for i, (judge, built) in enumerate(zip(spec.judges, judges, strict=True)):
        for output_only in ("qualification", "admitted_unqualified", "admission_note"):
            judge.ClearField(output_only)  # never what a client says
        # The identity is waited for only where a qualification could be this judge's.
        await built.prepare(patient=any(s.key.provider == built.config.provider for s in stored))
        decision = _decide(built, stored)
        field = f"spec.judges[{i}]"
        if decision.decided_by is None:
            judge.admission_note = decision.why
            if judge.weight_from_qualification:
                doubt = f" ({built.identity_doubt})" if built.identity_doubt else ""
                violations.append(
                    FieldViolation(
                        f"{field}.weight_from_qualification",
                        f"this tenant has no qualification of {built.judge_identity()}{doubt}: "
                        "run `tierank qualify` with this judge first",
                    )
                )
            continue
        judge.qualification = decision.decided_by.name
        if decision.refused:
            refusals.append(f"{field} ({built.name}: {decision.why})")
            judge.admitted_unqualified = True
            judge.admission_note = f"admitted by allow_unqualified_judges: {decision.why}"
        elif judge.weight_from_qualification:
            judge.weight = decision.decided_by.record.weight
    if violations:
        raise InvalidInput(violations)
    if refusals and not spec.allow_unqualified_judges:
        raise PreconditionFailed(
            f"judges qualified as no better than chance: {'; '.join(refusals)}. Qualify them "
            "again, drop them, or set allow_unqualified_judges to use them anyway",
            "JUDGE_NOT_QUALIFIED",
        )


async def _read_qualifications(storage: QualificationStore, tenant: str) -> list[_Stored]:
    records = await storage.list_qualifications(tenant, None, _ALL_QUALIFICATIONS)
    stored = []
    for record in records:
        report = eval_pb2.Qualification.FromString(record.payload)
        key = judge_key(record.judge_identity, report.judge.model)
        stored.append(_Stored(record, key, report.verdict))
    return stored


def _decide(judge: Judge, stored: Sequence[_Stored]) -> _Decision:
    # The judge's identity, then the spellings of it earlier releases stored qualifications
    # under (an endpoint as written, a model's label).
    label = judge.config.model
    keys = [judge_key(identity, label) for identity in judge.qualification_identities()]
    same = [s for s in stored if any(s.key.same_judge(key) for key in keys)]
    latest = same[0] if same else None
    doubt = judge.identity_doubt
    if doubt is not None and (latest is None or latest.usable):
        # Which weights answer is unknown: any judge measured at this endpoint, asked this
        # way, may be this one, and the latest word on each of them counts.
        suspect = _latest_refused(s for s in stored if any(s.key.same_place(k) for k in keys))
        if suspect is not None:
            return _Decision(
                suspect,
                refused=True,
                why=f"{doubt}, so it cannot be told apart from {suspect.key.model}, found no "
                f"better than chance there by {suspect.name} ({suspect.verdict})",
            )
    if latest is not None:
        if latest.usable:
            return _Decision(latest)
        why = f"{latest.name} found it no better than chance ({latest.verdict})"
        if doubt is not None:
            why += f"; {doubt}, so it is known by the model name it was asked for"
        return _Decision(latest, refused=True, why=why)
    kin = _latest_refused(s for s in stored if any(s.key.same_model(k) for k in keys))
    if kin is None:
        return _Decision()
    differences = ", ".join(keys[0].differences(kin.key))
    return _Decision(
        why=f"a new judge: it differs only by options ({differences}) from the same model "
        f"found no better than chance by {kin.name} ({kin.verdict})"
    )


def _latest_refused(candidates: Iterable[_Stored]) -> _Stored | None:
    """Of `candidates` (newest first), the newest whose judge's latest word is "not usable"."""
    seen: list[JudgeKey] = []
    for candidate in candidates:
        if any(candidate.key.same_judge(key) for key in seen):
            continue  # an older word on a judge already decided
        seen.append(candidate.key)
        if not candidate.usable:
            return candidate
    return None


def as_requested(spec: rank_pb2.JobSpec) -> rank_pb2.JobSpec:
    """`spec` without what admission filled in, to compare a stored job with a request."""
    requested = rank_pb2.JobSpec()
    requested.CopyFrom(spec)
    for judge in requested.judges:
        for output_only in ("qualification", "admitted_unqualified", "admission_note"):
            judge.ClearField(output_only)
        if judge.weight_from_qualification:
            judge.ClearField("weight")
    return requested
