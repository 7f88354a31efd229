"""Measures named by the strings users know, as in ir-measures: ``nDCG@10``, ``RR(rel=2)@10``.

Grammar: ``NAME[(key=value, ...)][@K]``. Names and parameters:

=================  ==========  ==================  ===============================
name               cutoff @K   parameters          trec_eval equivalent
=================  ==========  ==================  ===============================
``nDCG``           optional    ``ties`` (0)        ``ndcg`` / ``ndcg_cut.K``
``RR``             optional    ``rel`` (1)         ``recip_rank``
``P``              required    ``rel`` (1)         ``P.K``
``R``              optional    ``rel`` (1)         ``recall.K``
``AP``             optional    ``rel`` (1)         ``map`` / ``map_cut.K``
``Rprec``          none        ``rel`` (1)         ``Rprec``
``Success``        required    ``rel`` (1)         ``success.K``
``Judged``         optional    —                   (ir-measures ``Judged``)
``RA-nWG``         required    alpha, cap4, cap3   — (../shared/METRICS.md)
``PROC``           required    alpha, cap4, cap3   —
``%PROC``          required    alpha, cap4, cap3   —
``N-Recall4+``     required    —                   —
``N-Recall5``      required    —                   —
``Precision4+``    required    —                   —
``Harm``           required    —                   —
=================  ==========  ==================  ===============================

``rel`` is trec_eval's ``-l``: a document is relevant when its grade is >= rel. ``ties=1``
makes nDCG tie-aware: documents with equal scores (one tier) are averaged over all their
orders instead of being ordered by trec_eval's docid rule. The canonical
text of a measure (``str(measure)``) leaves out parameters at their default.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum

from tierank.limits import MAX_MEASURE_CUTOFF


class MeasureError(ValueError):
    """A measure string that names no known measure or has invalid parameters."""


class Family(Enum):
    """How a measure is computed: from a ranking (trec_eval family) or from a set
    (../shared/METRICS.md)."""

    RANKED = "ranked"
    SET = "set"


class _Cutoff(Enum):
    REQUIRED = "required"
    OPTIONAL = "optional"
    NONE = "none"


@dataclass(frozen=True)
class _Spec:
    family: Family
    cutoff: _Cutoff
    params: Mapping[str, type]
    defaults: Mapping[str, float | int]


_REL = {"rel": int}
_WEIGHTS = {"alpha": float, "cap4": float, "cap3": float}
_WEIGHT_DEFAULTS = {"alpha": 1.0, "cap4": 1.0, "cap3": 0.25}

_SPECS: dict[str, _Spec] = {
    "nDCG": _Spec(Family.RANKED, _Cutoff.OPTIONAL, {"ties": int}, {"ties": 0}),
    "RR": _Spec(Family.RANKED, _Cutoff.OPTIONAL, _REL, {"rel": 1}),
    "P": _Spec(Family.RANKED, _Cutoff.REQUIRED, _REL, {"rel": 1}),
    "R": _Spec(Family.RANKED, _Cutoff.OPTIONAL, _REL, {"rel": 1}),
    "AP": _Spec(Family.RANKED, _Cutoff.OPTIONAL, _REL, {"rel": 1}),
    "Rprec": _Spec(Family.RANKED, _Cutoff.NONE, _REL, {"rel": 1}),
    "Success": _Spec(Family.RANKED, _Cutoff.REQUIRED, _REL, {"rel": 1}),
    "Judged": _Spec(Family.RANKED, _Cutoff.OPTIONAL, {}, {}),
    "RA-nWG": _Spec(Family.SET, _Cutoff.REQUIRED, _WEIGHTS, _WEIGHT_DEFAULTS),
    "PROC": _Spec(Family.SET, _Cutoff.REQUIRED, _WEIGHTS, _WEIGHT_DEFAULTS),
    "%PROC": _Spec(Family.SET, _Cutoff.REQUIRED, _WEIGHTS, _WEIGHT_DEFAULTS),
    "N-Recall4+": _Spec(Family.SET, _Cutoff.REQUIRED, {}, {}),
    "N-Recall5": _Spec(Family.SET, _Cutoff.REQUIRED, {}, {}),
    "Precision4+": _Spec(Family.SET, _Cutoff.REQUIRED, {}, {}),
    "Harm": _Spec(Family.SET, _Cutoff.REQUIRED, {}, {}),
}

MEASURE_NAMES: tuple[str, ...] = tuple(_SPECS)

_SYNTAX = re.compile(r"(?P<name>[^(@]+)(?:\((?P<params>[^)]*)\))?(?:@(?P<cutoff>[^@]*))?")


@dataclass(frozen=True)
class Measure:
    """A parsed measure: name, optional cutoff K, and every parameter (defaults filled in)."""

    name: str
    cutoff: int | None
    params: tuple[tuple[str, float | int], ...]

    @property
    def family(self) -> Family:
        return _SPECS[self.name].family

    def param(self, key: str) -> float | int:
        return dict(self.params)[key]

    @property
    def rel(self) -> int:
        """The grade from which a document counts as relevant (parsed as an int)."""
        value = self.param("rel")
        assert isinstance(value, int), f"rel of {self} is {value!r}"
        return value

    @property
    def required_cutoff(self) -> int:
        """K, for a measure whose spec requires one (parsing refuses it without)."""
        assert self.cutoff is not None, f"{self} has no cutoff"
        return self.cutoff

    def __str__(self) -> str:
        defaults = _SPECS[self.name].defaults
        shown = [f"{k}={v}" for k, v in self.params if v != defaults[k]]
        text = self.name + (f"({','.join(shown)})" if shown else "")
        return text + (f"@{self.cutoff}" if self.cutoff is not None else "")


def parse_measure(text: str) -> Measure:
    """Parse ``NAME[(key=value,...)][@K]``; raises :class:`MeasureError` on any problem."""
    match = _SYNTAX.fullmatch(text.strip())
    if not match:
        raise MeasureError(f"cannot parse measure {text!r}; expected NAME[(key=value,...)][@K]")
    name = match["name"]
    spec = _SPECS.get(name)
    if spec is None:
        raise MeasureError(
            f"unknown measure {name!r} in {text!r}; known: {', '.join(MEASURE_NAMES)}"
        )
    cutoff = _parse_cutoff(text, match["cutoff"], spec)
    params = dict(spec.defaults)
    for item in filter(None, (p.strip() for p in (match["params"] or "").split(","))):
        key, sep, value = (part.strip() for part in item.partition("="))
        if not sep or key not in spec.params:
            allowed = ", ".join(spec.params) or "none"
            raise MeasureError(f"bad parameter {item!r} in {text!r}; {name} accepts: {allowed}")
        try:
            params[key] = spec.params[key](value)
        except ValueError:
            kind = spec.params[key].__name__
            raise MeasureError(
                f"parameter {key} in {text!r} must be {kind}, got {value!r}"
            ) from None
    return Measure(name, cutoff, tuple(sorted(params.items())))


def _parse_cutoff(text: str, raw: str | None, spec: _Spec) -> int | None:
    if raw is None:
        if spec.cutoff is _Cutoff.REQUIRED:
            raise MeasureError(f"measure {text!r} needs a cutoff, e.g. @10")
        return None
    if spec.cutoff is _Cutoff.NONE:
        raise MeasureError(f"measure {text!r} takes no cutoff")
    # At most 18 digits: any real cutoff, and far below the 4,300 digits int() refuses.
    if not re.fullmatch(r"[+-]?\d{1,18}", raw):
        raise MeasureError(
            f"cutoff in {text!r} must be an integer of at most 18 digits, got {raw!r}"
        )
    cutoff = int(raw)
    if cutoff <= 0:
        raise MeasureError(f"cutoff in {text!r} must be positive, got {cutoff}")
    if cutoff > MAX_MEASURE_CUTOFF:
        raise MeasureError(f"cutoff in {text!r} must be at most {MAX_MEASURE_CUTOFF}, got {cutoff}")
    return cutoff


def as_measure(measure: str | Measure) -> Measure:
    return measure if isinstance(measure, Measure) else parse_measure(measure)
