"""Strict reading of a judge's answer into passage numbers (1-based, best first).

Accepted forms: JSON `{"ranking": [3, 1, 2]}` (optionally inside a ```json fence) and text
`[3] > [1] > [2]`. Rules:

- Prose around the ranking is tolerated only when exactly one ranking is found in the answer;
  two or more (e.g. a draft and a final one) make the answer unreadable rather than guessed at.
- Out-of-range numbers are dropped; a number given twice keeps its first position.
- A partial ranking is kept as it is: it states only the pairs among its members. It is never
  padded with the missing numbers. Fewer than two usable numbers state no pair: unreadable.
- A truncated answer (the provider stopped at its output-token limit) keeps only items that are
  certainly complete: a bracketed `[n]` closes itself, but a trailing JSON number may be cut
  (`[3, 1, 2` could have been `[3, 1, 25]`), so only numbers followed by a comma count.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

_FENCE = re.compile(r"^```[a-zA-Z]*\s*(.*?)\s*```$", re.DOTALL)
_JSON_OBJECT = re.compile(r'\{\s*"ranking"\s*:\s*\[[^\[\]{}]*\]\s*\}')
_JSON_TRUNCATED = re.compile(r'\{\s*"ranking"\s*:\s*\[((?:\s*-?\d+\s*,)*)')
_TEXT_CHAIN = re.compile(r"\[\s*\d+\s*\](?:\s*>\s*\[\s*\d+\s*\])+")
_TEXT_ITEM = re.compile(r"\[\s*(\d+)\s*\]")


@dataclass(frozen=True)
class Ranking:
    numbers: tuple[int, ...]


@dataclass(frozen=True)
class Unreadable:
    reason: str


def parse_ranking(text: str, k: int, *, truncated: bool = False) -> Ranking | Unreadable:
    body = _strip_fence(text.strip())
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


def _find_rankings(body: str, truncated: bool) -> list[list[object]] | Unreadable:
    whole = _whole_json(body)
    if whole is not None:
        return whole
    found: list[list[object]] = [
        json.loads(m.group(0))["ranking"] for m in _JSON_OBJECT.finditer(body)
    ]
    found += [[int(n) for n in _TEXT_ITEM.findall(m.group(0))] for m in _TEXT_CHAIN.finditer(body)]
    if not found and truncated:
        cut = _JSON_TRUNCATED.search(body)
        if cut:
            found.append([int(n) for n in cut.group(1).replace(",", " ").split()])
    return found


def _whole_json(body: str) -> list[list[object]] | Unreadable | None:
    """The answer parsed as one JSON document, or None when it is not JSON at all."""
    try:
        document = json.loads(body)
    except ValueError:
        return None
    if isinstance(document, dict) and isinstance(document.get("ranking"), list):
        return [document["ranking"]]
    return Unreadable('JSON answer without a "ranking" list')


def _clean(items: list[object], k: int) -> Ranking | Unreadable:
    if not all(isinstance(item, int) and not isinstance(item, bool) for item in items):
        return Unreadable("the ranking holds items that are not integers")
    numbers: list[int] = []
    for number in items:
        assert isinstance(number, int)
        if 1 <= number <= k and number not in numbers:
            numbers.append(number)
    if len(numbers) < 2:
        return Unreadable(f"the ranking names fewer than two of the passages 1..{k}")
    return Ranking(tuple(numbers))
