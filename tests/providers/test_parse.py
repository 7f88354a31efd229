"""The strict ranking parser: forms, tolerance, and what it refuses to guess."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tierank.server.judges.parse import Ranking, Unreadable, parse_ranking


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('{"ranking": [3, 1, 2]}', (3, 1, 2)),
        ('```json\n{"ranking": [2, 3, 1]}\n```', (2, 3, 1)),
        ("[3] > [1] > [2]", (3, 1, 2)),
        ("[ 2 ]>[3] >[1]", (2, 3, 1)),
        ("My ranking: [2] > [1] > [3]. Passage [2] is best.", (2, 1, 3)),
        ('Sure. {"ranking": [1, 3]} is my answer', (1, 3)),
        ("[3] > [3] > [1] > [7] > [0] > [2]", (3, 1, 2)),
    ],
)
def test_readable_answers(text: str, expected: tuple[int, ...]) -> None:
    assert parse_ranking(text, k=3) == Ranking(expected)


@pytest.mark.parametrize(
    ("text", "reason_fragment"),
    [
        ("", "no ranking"),
        ("Passage 2 is the best, then 1.", "no ranking"),
        ("[1] > [2] but on reflection [2] > [1]", "2 rankings"),
        ('{"ranking": [1, 2]} or [2] > [1]', "2 rankings"),
        ('{"ranking": "3,1,2"}', '"ranking" list'),
        ('{"order": [1, 2]}', '"ranking" list'),
        ('{"ranking": [1, "2"]}', "not integers"),
        ('{"ranking": [true, 2]}', "not integers"),
        ("[3] > [9]", "fewer than two"),
        ('{"ranking": [3, 1,', "no ranking"),
    ],
)
def test_unreadable_answers(text: str, reason_fragment: str) -> None:
    parsed = parse_ranking(text, k=3)
    assert isinstance(parsed, Unreadable)
    assert reason_fragment in parsed.reason


def test_truncated_json_keeps_only_numbers_followed_by_a_comma() -> None:
    assert parse_ranking('{"ranking": [3, 1, 2', k=3, truncated=True) == Ranking((3, 1))
    assert isinstance(parse_ranking('{"ranking": [3, 1', k=3, truncated=True), Unreadable)


def test_truncated_text_keeps_closed_brackets() -> None:
    assert parse_ranking("[3] > [1] > [2", k=3, truncated=True) == Ranking((3, 1))


def test_a_complete_answer_marked_truncated_is_read_whole() -> None:
    assert parse_ranking('{"ranking": [2, 1, 3]}', k=3, truncated=True) == Ranking((2, 1, 3))


@given(st.lists(st.integers(min_value=-3, max_value=12), min_size=1, max_size=15))
def test_never_invents_an_order(numbers: list[int]) -> None:
    """Whatever comes back is the stated numbers, in range, first occurrences, in order."""
    k = 8
    expected: list[int] = []
    for n in numbers:
        if 1 <= n <= k and n not in expected:
            expected.append(n)
    for text in ('{"ranking": ' + str(numbers) + "}", " > ".join(f"[{n}]" for n in numbers)):
        parsed = parse_ranking(text, k)
        if len(expected) >= 2 and (text.startswith("{") or min(numbers) >= 0):
            assert parsed == Ranking(tuple(expected))
        elif len(expected) < 2:
            assert isinstance(parsed, Unreadable)
