"""The listwise prompt every LLM judge sends, and its token arithmetic.

Changing the wording changes verdicts, so any edit must bump TEMPLATE_VERSION: it is part of
each judge's cache identity and therefore of the verdict cache key.

Token rule: a text of n characters counts as ceil(n / 4) tokens (the usual average for English
with the GPT, Claude and Gemini tokenizers). Passages are cut to the judge's token budget by
that rule. Budget reservations need an upper bound instead, a worst case for the text's script:
an ASCII character counts as half a token (code and numbers stay above 2 characters per token),
and any other character as one token per byte of its UTF-8 encoding, since byte-level
tokenizers never produce more tokens than bytes (accented Latin and Cyrillic 2, CJK 3, emoji 4).
"""

from __future__ import annotations

import enum
import math

from tierank.evaluation.rubric import DEFAULT_RUBRIC
from tierank.server.judges.base import Passage

TEMPLATE_VERSION = "listwise-v3"
# Earlier templates whose qualifications still stand for this one: listwise-v3 changed only the
# form of the example and the reading of out-of-range numbers, not what a judge is asked, so a
# judge measured (and perhaps refused) under them is not a new judge.
QUALIFICATIONS_CARRY_OVER_FROM = ("listwise-v2",)
DEFAULT_PASSAGE_TOKEN_BUDGET = 300
CHARS_PER_TOKEN = 4
UPPER_BOUND_CHARS_PER_TOKEN = 2
# Chat framing the providers add around each message (role markers, separators).
MESSAGE_OVERHEAD_TOKENS = 16


class AnswerFormat(enum.StrEnum):
    TEXT = "text"  # [3] > [1] > [2]
    JSON = "json"  # {"ranking": [3, 1, 2]}


def estimate_tokens(text: str) -> int:
    return math.ceil(len(text) / CHARS_PER_TOKEN)


def upper_bound_tokens(text: str) -> int:
    """At least what any provider's tokenizer counts for `text` sent as one message."""
    ascii_chars = len(text.encode("ascii", "ignore"))
    other_bytes = len(text.encode("utf-8", "surrogatepass")) - ascii_chars
    return (
        math.ceil(ascii_chars / UPPER_BOUND_CHARS_PER_TOKEN) + other_bytes + MESSAGE_OVERHEAD_TOKENS
    )


def cut_to_budget(text: str, token_budget: int) -> str:
    """Whitespace collapsed, then cut at the last word boundary within the budget."""
    words = " ".join(text.split())
    limit = token_budget * CHARS_PER_TOKEN
    if len(words) <= limit:
        return words
    cut = words[:limit]
    boundary = cut.rfind(" ")
    # A single giant token (a URL, a base64 blob) has no boundary: cut it mid-word.
    return (cut[:boundary] if boundary > 0 else cut) + " …"


# The text instruction's example ranking. Letters, not numbers: a model that echoes the example
# (or any part of it) names no passage, so no echo can ever be read as a verdict.
EXAMPLE_PLACEHOLDERS = ("C", "A", "B")


def format_instruction(answer_format: AnswerFormat, k: int) -> str:
    if answer_format is AnswerFormat.JSON:
        return (
            f'Answer with JSON only, of the form {{"ranking": [...]}}: the numbers of all {k} '
            "passages, most relevant first, each number exactly once."
        )
    example = " > ".join(f"[{letter}]" for letter in EXAMPLE_PLACEHOLDERS)
    return (
        f"Answer with the ranking only: the numbers of all {k} passages in square brackets, "
        f'most relevant first, separated by " > ", in the form {example} (where each letter '
        f"stands for a passage number from 1 to {k}). Use each number exactly once."
    )


def render_prompt(
    query: str,
    rubric: str,
    passages: tuple[Passage, ...],
    answer_format: AnswerFormat,
    passage_token_budget: int = DEFAULT_PASSAGE_TOKEN_BUDGET,
) -> str:
    """Passages are numbered from 1 in the order given: that order is the presentation order.
    An empty rubric is replaced by the default definition of relevance."""
    numbered = "\n".join(
        f"[{number}] {cut_to_budget(passage.text, passage_token_budget)}"
        for number, passage in enumerate(passages, start=1)
    )
    k = len(passages)
    return (
        f"You are a relevance judge. Rank the {k} passages below by how well each one "
        "satisfies the rubric for the query.\n\n"
        f"Rubric: {rubric.strip() or DEFAULT_RUBRIC}\n\n"
        f"Query: {query.strip()}\n\n"
        f"Passages:\n{numbered}\n\n"
        f"Rank all {k} passages. {format_instruction(answer_format, k)}"
    )


def corrective_message(reason: str, answer_format: AnswerFormat, k: int) -> str:
    """The one follow-up sent after an unreadable answer."""
    return (
        f"Your answer could not be read: {reason}. Reply again with the ranking alone. "
        f"{format_instruction(answer_format, k)}"
    )
