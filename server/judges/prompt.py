"""The listwise prompt every LLM judge sends, and its token arithmetic.

Changing the wording changes verdicts, so any edit must bump TEMPLATE_VERSION: it is part of
each judge's cache identity and therefore of the verdict cache key.

Layout: what is the same for every call of one query (instructions, rubric, query, the form of
the answer) comes first and what changes (the passages, their count) last, so that a provider's
prompt cache, which serves a repeated prefix, can serve the first part on every call after the
first (`PromptParts.stable`; docs/providers.md, "Prompt caching").

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
from collections.abc import Sequence
from dataclasses import dataclass

from tierank.evaluation.rubric import DEFAULT_RUBRIC
from tierank.server.judges.base import Passage

TEMPLATE_VERSION = "listwise-v5"
# Earlier templates whose qualifications still stand for this one: listwise-v3 changed only the
# form of the example and the reading of out-of-range numbers, listwise-v4 only the order of
# the parts (the form of the answer stated before the passages, for prompt caching), and
# listwise-v5 only asks once more for the passages a readable answer leaves out
# (`missing_passages_message`), not what a judge is asked, so a judge measured (and perhaps
# refused) under them is not a new judge.
QUALIFICATIONS_CARRY_OVER_FROM = ("listwise-v4", "listwise-v3", "listwise-v2")
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


def format_instruction(answer_format: AnswerFormat, k: int | None = None) -> str:
    """The form of the answer; without `k`, in words that hold for any number of passages
    (the stable part of the prompt states it once for every call of a query)."""
    all_passages = f"all {k} passages" if k is not None else "all the passages"
    if answer_format is AnswerFormat.JSON:
        return (
            'Answer with JSON only, of the form {"ranking": [...]}: '
            f"the numbers of {all_passages}, most relevant first, each number exactly once."
        )
    example = " > ".join(f"[{letter}]" for letter in EXAMPLE_PLACEHOLDERS)
    numbers = f"a passage number from 1 to {k}" if k is not None else "a passage number"
    return (
        f"Answer with the ranking only: the numbers of {all_passages} in square brackets, "
        f'most relevant first, separated by " > ", in the form {example} (where each letter '
        f"stands for {numbers}). Use each number exactly once."
    )


@dataclass(frozen=True)
class PromptParts:
    """A prompt in two parts: `stable`, the same for every call of one query with one rubric
    and answer format, then `varying`, this call's passages. Sent as one message whose text
    is `stable + varying`; a provider that caches marked blocks (Anthropic) gets the two as
    blocks, the stable one marked when it is long enough to be cached."""

    stable: str
    varying: str

    @property
    def text(self) -> str:
        return self.stable + self.varying


def render_prompt_parts(
    query: str,
    rubric: str,
    passages: tuple[Passage, ...],
    answer_format: AnswerFormat,
    passage_token_budget: int = DEFAULT_PASSAGE_TOKEN_BUDGET,
) -> PromptParts:
    """Passages are numbered from 1 in the order given: that order is the presentation order.
    An empty rubric is replaced by the default definition of relevance. Nothing in the stable
    part depends on the passages, not even their number, so it is the same text, to the
    character, for every call of the query."""
    numbered = "\n".join(
        f"[{number}] {cut_to_budget(passage.text, passage_token_budget)}"
        for number, passage in enumerate(passages, start=1)
    )
    k = len(passages)
    stable = (
        "You are a relevance judge. Rank the passages below by how well each one satisfies "
        "the rubric for the query.\n\n"
        f"Rubric: {rubric.strip() or DEFAULT_RUBRIC}\n\n"
        f"Query: {query.strip()}\n\n"
        f"{format_instruction(answer_format)}\n\n"
    )
    varying = (
        f"Passages:\n{numbered}\n\nRank all {k} passages. {format_instruction(answer_format, k)}"
    )
    return PromptParts(stable, varying)


def render_prompt(
    query: str,
    rubric: str,
    passages: tuple[Passage, ...],
    answer_format: AnswerFormat,
    passage_token_budget: int = DEFAULT_PASSAGE_TOKEN_BUDGET,
) -> str:
    """The whole prompt as one text (see `render_prompt_parts`)."""
    return render_prompt_parts(query, rubric, passages, answer_format, passage_token_budget).text


def corrective_message(reason: str, answer_format: AnswerFormat, k: int) -> str:
    """The one follow-up sent after an unreadable answer."""
    return (
        f"Your answer could not be read: {reason}. Reply again with the ranking alone. "
        f"{format_instruction(answer_format, k)}"
    )


def missing_passages_message(named: Sequence[int], k: int, answer_format: AnswerFormat) -> str:
    """The one follow-up sent after a readable ranking that names only some of the k passages
    (a small model may rank as many as the instruction's example shows: 3), naming those it
    left out."""
    left_out = [number for number in range(1, k + 1) if number not in set(named)]
    return (
        f"Your ranking names {len(named)} of the {k} passages; it leaves out "
        f"{', '.join(f'[{number}]' for number in left_out)}. Reply again with the ranking of all "
        f"{k} passages. {format_instruction(answer_format, k)}"
    )
