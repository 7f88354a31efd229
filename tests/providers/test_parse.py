"""The strict ranking parser: forms, tolerance, and what it refuses to guess."""

from __future__ import annotations

import itertools
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tierank.server.judges.parse import Ranking, Unreadable, parse_ranking
from tierank.server.judges.prompt import AnswerFormat, corrective_message, format_instruction


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('{"ranking": [3, 1, 2]}', (3, 1, 2)),
        ('```json\n{"ranking": [2, 3, 1]}\n```', (2, 3, 1)),
        ("[3] > [1] > [2]", (3, 1, 2)),
        ("[ 2 ]>[3] >[1]", (2, 3, 1)),
        ("My ranking: [2] > [1] > [3]. Passage [2] is best.", (2, 1, 3)),
        ('Sure. {"ranking": [1, 3]} is my answer', (1, 3)),
        ("[3] > [3] > [1] > [2]", (3, 1, 2)),
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
        ("[3] > [9]", "names 9, but the passages are numbered 1 to 3"),
        ("[3] > [1] > [0] > [2]", "names 0"),
        ('{"ranking": [2, 3, 1, 4]}', "names 4"),
        ('{"ranking": [2]}', "fewer than two"),
        ('{"ranking": [3, 1,', "no ranking"),
        ("[1] > [2] > [1]", "names 1 twice"),
        ('{"ranking": [3, 1, 3, 2]}', "names 3 twice"),
        ('Here: {"ranking": [3, 1,, 2]}', "not valid JSON"),
        ("[1] [2] > [3]", "mixes"),
        ("[1], [2] > [3]", "mixes"),
    ],
)
def test_unreadable_answers(text: str, reason_fragment: str) -> None:
    parsed = parse_ranking(text, k=3)
    assert isinstance(parsed, Unreadable)
    assert reason_fragment in parsed.reason


def test_a_repeated_id_after_a_run_of_ids_is_not_read_as_a_pair() -> None:
    """Issue 13 item 7: this answer used to give Ranking((10, 1)), a vote nobody stated."""
    answer = "[1] [2] [3] [4] [5] [6] [7] [8] [9] [10] > [1]"
    assert isinstance(parse_ranking(answer, k=10), Unreadable)


@pytest.mark.parametrize("k", [2, 3, 4, 10, 20])
def test_an_echo_of_the_json_instructions_is_not_a_ranking(k: int) -> None:
    for echo in (
        format_instruction(AnswerFormat.JSON, k),
        corrective_message("no ranking found", AnswerFormat.JSON, k),
        'As asked, {"ranking": [...]}: {"ranking": [2, 1]}',
    ):
        parsed = parse_ranking(echo, k)
        assert isinstance(parsed, Unreadable), (k, echo)
        assert "repeats the form from the instructions" in parsed.reason


@pytest.mark.parametrize("k", [2, 3, 4, 10, 20])
def test_an_echo_of_the_instructions_is_not_a_ranking(k: int) -> None:
    """Issue 13 item 6: a small model answered the corrective follow-up with its example."""
    instruction = format_instruction(AnswerFormat.TEXT, k)
    example = re.search(r"\[[A-Z]\](?: > \[[A-Z]\])+", instruction)
    assert example is not None
    for echo in (
        example.group(0),
        instruction,
        corrective_message("no ranking found", AnswerFormat.TEXT, k),
    ):
        parsed = parse_ranking(echo, k)
        assert isinstance(parsed, Unreadable), (k, echo)
    complete = " > ".join(f"[{n}]" for n in range(k, 0, -1))
    assert parse_ranking(complete, k) == Ranking(tuple(range(k, 0, -1)))


@pytest.mark.parametrize("k", [2, 3, 4, 10, 20])
def test_no_part_of_the_example_is_read_as_an_answer(k: int) -> None:
    """Issue 22 item 14: at k=3 the example was [2] > [4] > [1] > [3]; the answer
    [2] > [4] > [1] lost [4] as out of range and became the vote 2 > 1. The example now names
    no passage, and any part of it, alone or mixed with numbers, is an echo."""
    instruction = format_instruction(AnswerFormat.TEXT, k)
    assert not re.search(r"\[\s*\d+\s*\]", instruction), instruction
    letters = re.findall(r"\[([A-Z])\]", instruction)
    assert len(letters) >= 2
    for length in range(1, len(letters) + 1):
        part = " > ".join(f"[{letter}]" for letter in letters[:length])
        for echo in (part, f"{part} > [1] > [2]", f"[2] > [1] > {part}", part.lower()):
            parsed = parse_ranking(echo, k)
            assert isinstance(parsed, Unreadable), (k, echo, parsed)
            assert "repeats the example" in parsed.reason


def test_an_answer_naming_a_passage_that_is_not_there_states_no_pair() -> None:
    """The answer of issue 22 item 14, and any ranking with a stray number: none of its pairs
    are read, since the judge was not ranking the passages shown."""
    for answer in ("[2] > [4] > [1]", "[2] > [4] > [1] > [3]", '{"ranking": [2, 4, 1]}'):
        parsed = parse_ranking(answer, k=3)
        assert isinstance(parsed, Unreadable), answer
        assert "names 4" in parsed.reason


def test_truncated_json_keeps_only_numbers_followed_by_a_comma() -> None:
    assert parse_ranking('{"ranking": [3, 1, 2', k=3, truncated=True) == Ranking((3, 1))
    assert isinstance(parse_ranking('{"ranking": [3, 1', k=3, truncated=True), Unreadable)


def test_truncated_text_keeps_closed_brackets() -> None:
    assert parse_ranking("[3] > [1] > [2", k=3, truncated=True) == Ranking((3, 1))


def test_a_complete_answer_marked_truncated_is_read_whole() -> None:
    assert parse_ranking('{"ranking": [2, 1, 3]}', k=3, truncated=True) == Ranking((2, 1, 3))


def _collapsed(numbers: list[int]) -> list[int]:
    return [n for n, _ in itertools.groupby(numbers)]


@given(st.lists(st.integers(min_value=-3, max_value=12), min_size=1, max_size=15))
def test_never_invents_an_order(numbers: list[int]) -> None:
    """Whatever comes back is the stated numbers, in order, each named once (an immediate
    repeat aside); a number named in two places or out of range is never guessed at."""
    k = 8
    collapsed = _collapsed(numbers)
    conflicting = len(set(collapsed)) != len(collapsed)
    stray = any(not 1 <= n <= k for n in collapsed)
    for text in ('{"ranking": ' + str(numbers) + "}", " > ".join(f"[{n}]" for n in numbers)):
        parsed = parse_ranking(text, k)
        if conflicting or stray or len(collapsed) < 2:
            assert isinstance(parsed, Unreadable)
        else:
            assert parsed == Ranking(tuple(collapsed))


# -- answer shapes: bracketed numbers, separators, prose and JSON, in any order --------------

_ITEM = st.integers(min_value=-1, max_value=12).map(lambda n: f"[{n}]")
# Mostly `>`, so that many runs are chains; the rest make runs ambiguous or split them.
_SEPARATOR = st.sampled_from(
    [" > "] * 6 + [">", "  >\n", " ", ", ", "\n", " >> ", " < ", " = ", ". "]
)
_PROSE = st.sampled_from(["Passage ", " and ", " best. ", " 2 ", ": ", " then ", " I think "])
_JSON = st.one_of(
    st.lists(st.integers(min_value=-1, max_value=12), max_size=5).map(
        lambda ns: '{"ranking": ' + str(ns) + "}"
    ),
    st.sampled_from(['{"ranking": [...]}', '{"ranking": [2,, 1]}', '{"ranking": [1, 2']),
)


@st.composite
def _run(draw: st.DrawFn) -> str:
    """Bracketed numbers joined by separators: a clean `>` chain half of the time."""
    items = draw(st.lists(_ITEM, min_size=1, max_size=8))
    clean = draw(st.booleans())
    text = items[0]
    for item in items[1:]:
        text += (" > " if clean else draw(_SEPARATOR)) + item
    return text


@st.composite
def _answer(draw: st.DrawFn) -> str:
    """Runs, prose and JSON, each joined to the next by words or glued to it."""
    segments = draw(st.lists(st.one_of(_run(), _run(), _PROSE, _JSON), min_size=1, max_size=4))
    text = segments[0]
    for segment in segments[1:]:
        text += draw(st.sampled_from(["", " ", " so then ", "\n", ". My ranking: "])) + segment
    return text


_ANSWER = _answer()

_CHAIN = re.compile(r"\[\s*-?\d+\s*\](?:\s*>\s*\[\s*-?\d+\s*\])+")
_BRACKET = re.compile(r"\[\s*-?\d+\s*\]")


def _glued_to_another_item(text: str, start: int, end: int) -> bool:
    """Whether a bracketed number sits next to text[start:end] with no word in between."""
    before = [m for m in _BRACKET.finditer(text, 0, start)]
    after = _BRACKET.search(text, end)
    if before and not re.search(r"\w", text[before[-1].end() : start]):
        return True
    return after is not None and not re.search(r"\w", text[end : after.start()])


@settings(max_examples=400)
@given(_ANSWER, st.integers(min_value=2, max_value=10))
def test_no_answer_yields_a_pair_it_does_not_state_in_one_unambiguous_chain(
    text: str, k: int
) -> None:
    parsed = parse_ranking(text, k)
    if not isinstance(parsed, Ranking):
        return
    numbers = list(parsed.numbers)
    assert len(numbers) >= 2 and len(set(numbers)) == len(numbers)
    assert all(1 <= n <= k for n in numbers)
    if "{" in text:
        return  # read from JSON, covered by test_never_invents_an_order
    chains = list(_CHAIN.finditer(text))
    # Exactly one `>` chain in the text, standing alone ...
    assert len(chains) == 1, (text, parsed)
    (chain,) = chains
    assert not _glued_to_another_item(text, chain.start(), chain.end()), (text, parsed)
    # ... naming no number in two places, and the ranking is exactly what it states.
    stated = _collapsed([int(n) for n in re.findall(r"-?\d+", chain.group(0))])
    assert len(set(stated)) == len(stated), (text, parsed)
    assert numbers == stated, (text, parsed)
