from __future__ import annotations

import json

import pytest

from tierank.evaluation import (
    Candidate,
    FormatError,
    read_candidates,
    read_qrels,
    read_run,
    write_candidates,
    write_qrels,
    write_run,
)


def _write(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text)
    return path


def test_qrels_skip_comments_and_blank_lines_but_keep_hash_in_docids(tmp_path):
    path = _write(tmp_path, "q.txt", "# header\n\n1 0 doc#4_1 2\n  # indented comment\n1 Q0 b 0\n")
    assert read_qrels(path) == {"1": {"doc#4_1": 2, "b": 0}}


def test_run_ignores_fields_after_the_sixth_as_trec_eval_does(tmp_path):
    path = _write(tmp_path, "r.txt", "1 Q0 a 1 2.5 tag more junk\n# c\n1 Q0 b 2 1.5 tag\n")
    assert read_run(path) == {"1": {"a": 2.5, "b": 1.5}}


@pytest.mark.parametrize(
    ("text", "line", "problem"),
    [
        ("1 0 a 1\n1 0 b\n", 2, "expected 4 fields"),
        ("# c\n1 0 a high\n", 2, "not an integer"),
        ("1 0 a 1\n\n1 0 a 2\n", 3, "judged twice"),
    ],
)
def test_bad_qrels_name_file_and_line(tmp_path, text, line, problem):
    path = _write(tmp_path, "bad.qrels", text)
    with pytest.raises(FormatError, match=problem) as caught:
        read_qrels(path)
    assert str(caught.value).startswith(f"{path}:{line}: ")
    assert caught.value.line_number == line


def test_empty_qrels_is_an_error(tmp_path):
    path = _write(tmp_path, "empty.qrels", "# only a comment\n\n")
    with pytest.raises(FormatError, match="empty") as caught:
        read_qrels(path)
    assert str(path) in str(caught.value)


@pytest.mark.parametrize(
    ("text", "line", "problem"),
    [
        ("1 Q0 a 1 0.5\n", 1, "expected 6 fields"),
        ("1 Q0 a 1 0.5 t\n1 Q0 b x 0.4 t\n", 2, "rank 'x'"),
        ("1 Q0 a 1 high t\n", 1, "score 'high'"),
        ("1 Q0 a 1 nan t\n", 1, "not finite"),
        ("1 Q0 a 1 0.5 t\n2 Q0 a 1 0.5 t\n1 Q0 a 2 0.4 t\n", 3, "listed twice"),
    ],
)
def test_bad_runs_name_file_and_line(tmp_path, text, line, problem):
    path = _write(tmp_path, "bad.run", text)
    with pytest.raises(FormatError, match=problem) as caught:
        read_run(path)
    assert str(caught.value).startswith(f"{path}:{line}: ")


def test_candidates_accept_aliases_and_metadata(tmp_path):
    lines = [
        json.dumps({"id": "a", "text": "alpha", "metadata": {"url": "u"}}),
        "",
        json.dumps({"docid": "b", "contents": "beta"}),
    ]
    path = _write(tmp_path, "c.jsonl", "\n".join(lines) + "\n")
    assert read_candidates(path) == [
        Candidate("a", "alpha", {"url": "u"}),
        Candidate("b", "beta", {}),
    ]


@pytest.mark.parametrize(
    ("line", "problem"),
    [
        ("{not json", "invalid JSON"),
        ('["a"]', "JSON object"),
        ('{"text": "t"}', "missing field 'id' or 'docid'"),
        ('{"id": "x", "docid": "y", "text": "t"}', "aliases"),
        ('{"id": 3, "text": "t"}', "must be a string"),
        ('{"id": "x", "text": "t", "metadata": 1}', "metadata"),
        ('{"id": "a", "text": "again"}', "duplicate candidate id"),
    ],
)
def test_bad_candidates_name_file_and_line(tmp_path, line, problem):
    path = _write(tmp_path, "c.jsonl", '{"id": "a", "text": "t"}\n' + line + "\n")
    with pytest.raises(FormatError, match=problem) as caught:
        read_candidates(path)
    assert str(caught.value).startswith(f"{path}:2: ")


def test_shared_passages_file_reads(shared_data):
    candidates = read_candidates(shared_data / "trec-dl/passages/dl19-rankllm-union-passages.jsonl")
    assert len(candidates) == 14581
    assert all(c.text for c in candidates[:100])


def test_round_trips(tmp_path):
    qrels = {"1": {"a": 3, "b": -1}, "2": {"c": 0}}
    run = {"1": {"a": 0.5, "b": 0.5, "c": 1.25}}
    candidates = [Candidate("a", "héllo\nworld", {"k": [1]})]
    write_qrels(tmp_path / "q", qrels)
    write_run(tmp_path / "r", run, tag="mine")
    write_candidates(tmp_path / "c", candidates)
    assert read_qrels(tmp_path / "q") == qrels
    assert read_run(tmp_path / "r") == run
    assert read_candidates(tmp_path / "c") == candidates
    # Ranks follow trec_eval's order: score, then docid descending ("b" before "a").
    ranked = [line.split()[2:4] for line in (tmp_path / "r").read_text().splitlines()]
    assert ranked == [["c", "1"], ["b", "2"], ["a", "3"]]


def test_line_separators_inside_json_strings_do_not_split_records(tmp_path):
    # MS MARCO passages contain U+2028 and U+0085; only "\n" ends a JSONL record.
    text = json.dumps({"id": "a", "text": "one\u2028two\x85three"}, ensure_ascii=False)
    path = _write(tmp_path, "c.jsonl", text + "\r\n")
    assert read_candidates(path) == [Candidate("a", "one\u2028two\x85three")]


def test_crlf_trec_files(tmp_path):
    assert read_qrels(_write(tmp_path, "q", "1 0 a 1\r\n")) == {"1": {"a": 1}}
    assert read_run(_write(tmp_path, "r", "1 Q0 a 1 0.5 t\r\n")) == {"1": {"a": 0.5}}


def test_run_tag_must_be_one_word(tmp_path):
    with pytest.raises(ValueError, match="one word"):
        write_run(tmp_path / "r", {"1": {"a": 1.0}}, tag="two words")
