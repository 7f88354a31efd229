"""Strict reading of a judge's answer into passage numbers (1-based, best first).

Accepted forms: JSON `{"ranking": [3, 1, 2]}` (optionally inside a ```json fence) and text
`[3] > [1] > [2]`. Rules, each refusing to guess rather than inventing a vote:

- Prose around the ranking is tolerated only when exactly one ranking is found in the answer;
  two or more (e.g. a draft and a final one) make the answer unreadable.
- A text ranking is a run of bracketed numbers joined by `>` alone. A run that joins some of its
  numbers by `>` and others by anything else without words in between (`[1] [2] > [3]`,
  `[1], [2] > [3]`) is ambiguous, hence unreadable: only a whole run is read, never a piece.
- The text instruction's example is written in letters (`prompt.EXAMPLE_PLACEHOLDERS`), so no
  echo of it, whole or in part, names a passage; an answer holding a bracketed letter, or
  quoting the JSON form `{"ranking": [...]}`, is an echo of the instructions, not a verdict. A
  JSON ranking that does not decode is unreadable, even beside one that does.
- A number named twice is unreadable (it is placed in two conflicting positions), unless the
  repeats are next to each other (`[3] > [3] > [1]` states only 3 > 1).
- A number that is not one of the passages 1..k makes the whole answer unreadable: the judge
  is not ranking these passages (it may be quoting an example, or another batch), so none of
  its pairs can be trusted. A partial ranking is kept as it is: it states only the pairs among
  its members and is never padded. Fewer than two numbers: unreadable.
- A truncated answer (the provider stopped at its output-token limit) keeps only items that are
  certainly complete: a bracketed `[n]` closes itself, but a trailing JSON number may be cut
  (`[3, 1, 2` could have been `[3, 1, 25]`), so only numbers followed by a comma count.
"""

from __future__ import annotations

import itertools
import json
import re
from collections import Counter
from dataclasses import dataclass

_FENCE = re.compile(r"^```[a-zA-Z]*\s*(.*?)\s*```$", re.DOTALL)
_JSON_OBJECT = re.compile(r'\{\s*"ranking"\s*:\s*\[[^\[\]{}]*\]\s*\}')
_JSON_TRUNCATED = re.compile(r'\{\s*"ranking"\s*:\s*\[((?:\s*-?\d+\s*,)*)')
_TEXT_ITEM = re.compile(r"\[\s*(-?\d+)\s*\]")
# A bracketed letter is a placeholder of the instruction's example, never a passage number.
_PLACEHOLDER = re.compile(r"\[\s*[A-Za-z]\s*\]")
# Text between two bracketed numbers that holds a word or a number splits them into two runs.
_PROSE = re.compile(r"\w")


@dataclass(frozen=True)
class Ranking:
    numbers: tuple[int, ...]


@dataclass(frozen=True)
class Unreadable:
    reason: str


def parse_ranking(text: str, k: int, *, truncated: bool = False) -> Ranking | Unreadable:
    body = _strip_fence(text.strip())
    if _PLACEHOLDER.search(body):
        return Unreadable("the answer repeats the example from the instructions")
    found = _find_rankings(body, truncated)
    if isinstance(found, Unreadable):
        return found
    if not found:
        return Unreadable("no ranking found")
    if len(found) > 1:
        return Unreadable(f"{len(found)} rankings found, expected exactly one")
    return _clean(found[0], k)


def _strip_fence(text: str) -> str:
    fenced = _FENCE.match(text)
    return fenced.group(1) if fenced else text


# The items of each ranking found, JSON or text.
Found = list[list[object]]


def _find_rankings(body: str, truncated: bool) -> Found | Unreadable:
    whole = _whole_json(body)
    if whole is not None:
        return whole
    found: Found = []
    for match in _JSON_OBJECT.finditer(body):
        try:
            found.append(json.loads(match.group(0))["ranking"])
        except ValueError:
            if "..." in match.group(0):
                return Unreadable("the answer repeats the form from the instructions")
            return Unreadable("a JSON ranking that is not valid JSON")
    chains = _text_chains(body)
    if isinstance(chains, Unreadable):
        return chains
    found += [list(chain) for chain in chains]
    if not found and truncated:
        cut = _JSON_TRUNCATED.search(body)
        if cut:
            found.append([int(n) for n in cut.group(1).replace(",", " ").split()])
    return found


def _whole_json(body: str) -> Found | Unreadable | None:
    """The answer parsed as one JSON document, or None when it is not JSON at all."""
    try:
        document = json.loads(body)
    except ValueError:
        return None
    if isinstance(document, dict) and isinstance(document.get("ranking"), list):
        return [document["ranking"]]
    return Unreadable('JSON answer without a "ranking" list')


def _text_chains(body: str) -> list[list[int]] | Unreadable:
    """The `>` chains of the answer. Bracketed numbers with no words between them form one
    run; a run is a chain when every gap in it is a lone `>`, and ambiguous when only some are."""
    chains: list[list[int]] = []
    run: list[re.Match[str]] = []
    links: list[bool] = []

    def close_run() -> Unreadable | None:
        if any(links):
            if not all(links):
                return Unreadable(
                    "a ranking mixes '>' with other separators between bracketed numbers"
                )
            chains.append([int(m.group(1)) for m in run])
        return None

    for match in _TEXT_ITEM.finditer(body):
        gap = body[run[-1].end() : match.start()] if run else ""
        if run and not _PROSE.search(gap):
            run.append(match)
            links.append(gap.strip() == ">")
            continue
        if (bad := close_run()) is not None:
            return bad
        run, links = [match], []
    if (bad := close_run()) is not None:
        return bad
    return chains


def _clean(items: list[object], k: int) -> Ranking | Unreadable:
    integers = [item for item in items if isinstance(item, int) and not isinstance(item, bool)]
    if len(integers) < len(items):
        return Unreadable("the ranking holds items that are not integers")
    # An immediate repeat ([3] > [3]) places nothing differently; any other repeat does.
    collapsed = [number for number, _ in itertools.groupby(integers)]
    repeated = min((n for n, count in Counter(collapsed).items() if count > 1), default=None)
    if repeated is not None:
        return Unreadable(f"the ranking names {repeated} twice, in different places")
    stray = next((n for n in collapsed if not 1 <= n <= k), None)
    if stray is not None:
        return Unreadable(f"the ranking names {stray}, but the passages are numbered 1 to {k}")
    if len(collapsed) < 2:
        return Unreadable(f"the ranking names fewer than two of the passages 1..{k}")
    return Ranking(tuple(collapsed))
