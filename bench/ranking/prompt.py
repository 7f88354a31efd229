"""The one prompt-size rule every method is charged by.

Every judge call, whatever the method (a listwise window, a setwise "pick the best", a pairwise
comparison, a tournament batch), is charged as this listwise prompt rendered with the query and
the passages in the order shown, at ``ceil(characters / 4)`` input tokens. One template for all
methods keeps the comparison about how many passages each method shows, not about wording.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

CHARS_PER_TOKEN = 4

_HEADER = (
    "You are ranking passages by how relevant they are to a search query.\n"
    "Query: {query}\n\n"
    "Passages:\n"
)
_PASSAGE = "[{label}] {text}\n"
_FOOTER = (
    "\nRank all {count} passages from most to least relevant to the query. Answer only with "
    "their labels in order, for example [2] > [1] > [3].\n"
)


def render_prompt(query: str, passages: Sequence[str]) -> str:
    body = "".join(_PASSAGE.format(label=i + 1, text=text) for i, text in enumerate(passages))
    return _HEADER.format(query=query) + body + _FOOTER.format(count=len(passages))


def estimate_input_tokens(query: str, passages: Sequence[str]) -> int:
    return math.ceil(len(render_prompt(query, passages)) / CHARS_PER_TOKEN)
