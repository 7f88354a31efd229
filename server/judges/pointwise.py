"""The pointwise prompt: one passage graded 0–3 for one query, in the spirit of UMBRELA.

UMBRELA (Upadhyay et al., 2024) reproduces Bing's relevance-labelling prompt (Thomas et al.,
2023) on the TREC Deep Learning scale: describe the four grades, ask the model to weigh intent
match and trustworthiness step by step, and answer with the final grade only. The wording
here is our own; the scale is TREC DL's, so its grades compare with NIST's qrels directly.

Changing the wording changes grades, so any edit must bump POINTWISE_TEMPLATE_VERSION: it is
part of each grader's cache identity and therefore of the verdict cache key.

Accepted answers (strict, like the listwise parser): JSON `{"grade": 2}`, or text holding
exactly one `final score: 2` (UMBRELA's form, `#`, `*` and case ignored), or a bare `2`.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from tierank.limits import MAX_GRADE, MIN_GRADE
from tierank.server.judges.llm import AnswerSchema
from tierank.server.judges.parse import Unreadable
from tierank.server.judges.prompt import AnswerFormat, PromptParts, cut_to_budget

POINTWISE_TEMPLATE_VERSION = "pointwise-umbrela-0-3-v1"
# "##final score: 3" is about 8 tokens; the rest is headroom for a stray word.
ANSWER_TOKENS = 24

GRADE_SCHEMA = AnswerSchema(
    "grade",
    {
        "type": "object",
        "properties": {"grade": {"type": "integer", "enum": [0, 1, 2, 3]}},
        "required": ["grade"],
        "additionalProperties": False,
    },
)

_SCALE = """\
3 = the passage is dedicated to the query and contains the exact answer;
2 = the passage answers the query, but the answer is unclear or hidden among extraneous \
information;
1 = the passage is related to the query but does not answer it;
0 = the passage has nothing to do with the query."""

_FINAL_SCORE = re.compile(r"final\s+(?:score|grade)\s*[:=]?\s*\**\s*(-?\d+)", re.IGNORECASE)
_BARE = re.compile(r"[\s#*\"'`]*(-?\d+)[\s.*\"'`]*")


@dataclass(frozen=True)
class Grade:
    value: int


def format_instruction(answer_format: AnswerFormat) -> str:
    if answer_format is AnswerFormat.JSON:
        return 'Answer with JSON only, of the form {"grade": G}, G an integer from 0 to 3.'
    return 'Answer in the form "##final score: G", G an integer from 0 to 3, with no reasoning.'


def render_grade_prompt(
    query: str, rubric: str, passage: str, answer_format: AnswerFormat, passage_token_budget: int
) -> PromptParts:
    """The prompt in its two parts: everything before the passage (the scale, the rubric, the
    query) is the same for every grade of a query, for a provider's prompt cache."""
    rubric_line = (
        f"Rubric (what relevant means for this task): {rubric.strip()}\n\n" if rubric else ""
    )
    stable = (
        "You are a relevance judge. Given a query and a passage, grade how well the passage "
        "satisfies the query on an integer scale from 0 to 3:\n"
        f"{_SCALE}\n\n"
        "Give 1 to a passage that is about the topic but not fully on it, 2 to one that holds "
        "something important for the query along with other material, and 3 to one that "
        "refers only and entirely to what the query asks. If none fits, give 0.\n\n"
        f"{rubric_line}"
        f"Query: {query.strip()}\n\n"
    )
    varying = (
        f"Passage: {cut_to_budget(passage, passage_token_budget)}\n\n"
        "Work through it silently: consider the intent behind the query, how well the "
        "passage matches a likely intent, and how trustworthy the passage is; weigh these and "
        f"decide on one final grade. {format_instruction(answer_format)}"
    )
    return PromptParts(stable, varying)


def corrective_grade_message(reason: str, answer_format: AnswerFormat) -> str:
    """The one follow-up sent after an unreadable answer."""
    return (
        f"Your answer could not be read: {reason}. Reply again with the grade alone. "
        f"{format_instruction(answer_format)}"
    )


def parse_grade(text: str, truncated: bool = False) -> Grade | Unreadable:
    """A grade from an answer, or why none can be read. A truncated answer is read like any
    other: a grade is one digit, so a complete `final score: 2` cannot have been cut."""
    body = text.strip()
    fenced = re.fullmatch(r"```[a-zA-Z]*\s*(.*?)\s*```", body, re.DOTALL)
    if fenced:
        body = fenced.group(1)
    try:
        document = json.loads(body)
    except ValueError:
        document = None
    if isinstance(document, dict):
        value = document.get("grade")
        if not isinstance(value, int) or isinstance(value, bool):
            return Unreadable('JSON answer without an integer "grade"')
        return _in_range(value)
    found = _FINAL_SCORE.findall(body)
    if len(found) > 1:
        return Unreadable(f"{len(found)} final scores found, expected exactly one")
    if found:
        return _in_range(int(found[0]))
    bare = _BARE.fullmatch(body)
    if bare:
        return _in_range(int(bare.group(1)))
    return Unreadable("no final score found")


def _in_range(value: int) -> Grade | Unreadable:
    if not MIN_GRADE <= value <= MAX_GRADE:
        return Unreadable(f"grade {value} is outside {MIN_GRADE}..{MAX_GRADE}")
    return Grade(value)
