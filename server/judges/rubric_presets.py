"""Rubric presets: named, versioned rubrics for what users commonly evaluate.

A rubric field that reads `preset:NAME` or `preset:NAME@VERSION` is replaced by that preset's
text at the API edge, before anything is stored or prompted; without @VERSION the highest
version is used. Because the verdict-cache key holds the rubric text, every version misses the
cache of the others: a released text is never edited, a changed text is a new version, and
older versions stay here so that `@VERSION` reproduces an earlier evaluation.

`kind` says what a preset was written for: listwise ranking (jobs, qualify) or a pointwise
grader (GradePairs, FillQrels, anchoring). Either kind is accepted in either place, since both
read well there: ranking several generated answers by groundedness is a listwise use of a
pointwise preset.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from tierank.server.errors import FieldViolation, InvalidInput, shown

LISTWISE = "listwise"
POINTWISE = "pointwise"
PREFIX = "preset:"
_REFERENCE = re.compile(r"preset:(?P<name>[a-z][a-z0-9-]*)(?:@(?P<version>[1-9][0-9]{0,8}))?")


@dataclass(frozen=True)
class Preset:
    name: str
    version: int
    kind: str
    description: str
    text: str

    @property
    def label(self) -> str:
        return f"{self.name}@{self.version}"


class UnknownPreset(ValueError):
    """A rubric that names no known preset (version); `rule` says why, for a field violation."""

    def __init__(self, rule: str) -> None:
        super().__init__(rule)
        self.rule = rule


_CONTEXT_RELEVANCE_1 = (
    "Context relevance, the first leg of the RAG triad: each passage is retrieved context that "
    "a language model would be given to answer the query, and a passage is relevant to the "
    "extent that what it says bears on what the query asks. Most relevant are passages about "
    "the query's specific subject and the particular aspect it asks about (the entity, time, "
    "place, condition or comparison the query names); less, those that address it only in "
    "part or among unrelated material; least, those that merely share words or a general "
    "topic with the query. A passage about a different entity or another sense of the "
    "query's words is not relevant, however many words it shares. Judge what the passage "
    "says, not whether it is true, well written or long."
)

_ANSWER_USEFULNESS_1 = (
    "Usefulness for answering: imagine writing a correct and complete answer to the query from "
    "these passages alone. A passage is useful to the extent that the answer would draw on it. "
    "Most useful are passages that contain the answer, stated outright or following from what "
    "the passage says without outside knowledge; next, passages that supply a needed part of "
    "it (a definition, figure, date, step, cause or condition the answer depends on); least, "
    "passages that give only background an answer could leave out. A passage on the right "
    "topic that holds nothing the answer would use is not useful, nor is one that answers a "
    "different question. Prefer specific, checkable statements over general ones; do not "
    "reward length or repetition."
)

_ANSWER_RELEVANCE_1 = (
    "Answer relevance, a leg of the RAG triad: the query is a user's question and the passage "
    "is an answer a system generated for it. Grade how well the answer responds to the "
    "question asked, on this scale, which replaces any other grade definitions: 3 = it "
    "responds directly and completely to what the question asks, with nothing beside the "
    "point; 2 = it responds to the question, but only in part, vaguely, or amid material the "
    "question did not ask for; 1 = it is on the question's topic but does not respond to what "
    "is asked (it answers a different or broader question, or only restates the question); "
    "0 = it is unrelated, empty, or declines to answer. Judge relevance only: do not lower a "
    "grade because you believe the answer is wrong (groundedness measures support), nor raise "
    "it for length, confidence or style."
)

_GROUNDEDNESS_1 = (
    "Groundedness, a leg of the RAG triad: the query holds a user's question followed by the "
    "passages retrieved for it, and the passage is an answer generated from them. Grade how "
    "far the answer's claims are supported by those retrieved passages, on this scale, which "
    "replaces any other grade definitions: 3 = every factual claim in the answer is stated "
    "in the retrieved passages or follows directly from them; 2 = its central claims are "
    "supported, but a minor detail is not found in them; 1 = some claims are supported, but a "
    "claim central to the answer is not, or goes beyond what the passages say; 0 = its "
    "central claims are unsupported, or any claim contradicts the passages. Check claim by claim "
    "against the retrieved passages only, never against your own knowledge: a true statement "
    "they do not make is unsupported. Words that claim nothing (restating the question, "
    "hedges) count neither way, and an answer that says the passages do not answer the "
    "question, when they do not, is grounded."
)

# Every version ever released, oldest first; a new version is appended, never edited in place.
_RELEASED = (
    Preset(
        "context-relevance",
        1,
        LISTWISE,
        "RAG triad context relevance: is the retrieved passage about what the query asks?",
        _CONTEXT_RELEVANCE_1,
    ),
    Preset(
        "answer-usefulness",
        1,
        LISTWISE,
        "Would an answer to the query draw on the passage? Answers first, background last.",
        _ANSWER_USEFULNESS_1,
    ),
    Preset(
        "answer-relevance",
        1,
        POINTWISE,
        "RAG triad answer relevance, 0-3: query = the question, passage = a generated answer.",
        _ANSWER_RELEVANCE_1,
    ),
    Preset(
        "groundedness",
        1,
        POINTWISE,
        "RAG triad groundedness, 0-3: query = the question and the retrieved passages, "
        "passage = a generated answer; are its claims supported by them?",
        _GROUNDEDNESS_1,
    ),
)


def _by_name(released: tuple[Preset, ...]) -> dict[str, dict[int, Preset]]:
    presets: dict[str, dict[int, Preset]] = {}
    for preset in released:
        presets.setdefault(preset.name, {})[preset.version] = preset
    return presets


# name -> version -> preset, names in the order they were released.
PRESETS: Mapping[str, Mapping[int, Preset]] = _by_name(_RELEASED)


def current_presets() -> list[Preset]:
    """The highest version of each preset, listwise ones first."""
    latest = [versions[max(versions)] for versions in PRESETS.values()]
    return sorted(latest, key=lambda p: p.kind != LISTWISE)


def find_preset(rubric: str, kind: str | None) -> Preset | None:
    """The preset a rubric names, or None for a rubric of its own. Raises UnknownPreset for a
    rubric that starts with `preset:` but names no released preset or version. `kind` is the
    field's (LISTWISE or POINTWISE): the rule lists the presets written for it first."""
    reference = rubric.strip()
    if not reference.startswith(PREFIX):
        return None
    matched = _REFERENCE.fullmatch(reference)
    if matched is None:
        raise UnknownPreset(
            f"{shown(reference)} is not a preset reference: write preset:NAME or "
            "preset:NAME@VERSION, NAME as ListRubrics lists it"
        )
    name = matched["name"]
    versions = PRESETS.get(name)
    if versions is None:
        raise UnknownPreset(f"unknown rubric preset {shown(name)}; presets: {_known(kind)}")
    if matched["version"] is None:
        return versions[max(versions)]
    version = int(matched["version"])
    if version not in versions:
        known = ", ".join(str(v) for v in sorted(versions))
        raise UnknownPreset(f"preset {shown(name)} has no version {version}; it has: {known}")
    return versions[version]


def resolve_rubric(field: str, text: str, kind: str | None) -> tuple[str, str]:
    """(the rubric to use, the preset's "NAME@VERSION" or "" for a rubric of its own).
    A reference to no known preset is INVALID_ARGUMENT on `field`."""
    try:
        preset = find_preset(text, kind)
    except UnknownPreset as unknown:
        raise InvalidInput([FieldViolation(field, unknown.rule)]) from None
    if preset is None:
        return text, ""
    return preset.text, preset.label


def _known(kind: str | None) -> str:
    """ "a, b (listwise), c, d (pointwise)", the field's kind first."""
    kinds = (POINTWISE, LISTWISE) if kind == POINTWISE else (LISTWISE, POINTWISE)
    groups = []
    for group in kinds:
        names = [p.name for p in current_presets() if p.kind == group]
        if names:
            groups.append(f"{', '.join(names)} ({group})")
    return ", ".join(groups)
