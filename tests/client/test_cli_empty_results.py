"""Results with nothing in them say so (issue 34, item 18): an empty study list, a run that
shares no query with the labels, two label sets that share no pair; where nothing was
measured, the exit status is 3 (README's table)."""

from __future__ import annotations

import codecs
import json
from pathlib import Path

from cli_process import tierank

EXIT_NOTHING_MEASURED = 3


def test_study_list_on_an_empty_database_says_so(tmp_path: Path) -> None:
    db = str(tmp_path / "t.db")
    listed = tierank("study", "list", "--db", db)
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout == "no studies\n"
    as_json = tierank("study", "list", "--db", db, "--json")
    assert as_json.returncode == 0 and as_json.stdout == ""  # JSON lines: none


def test_eval_of_a_run_sharing_no_query_with_the_labels(
    tierank_server: str, tmp_path: Path
) -> None:
    run = tmp_path / "run.trec"
    run.write_bytes(codecs.BOM_UTF8 + b"q1 Q0 a 1 2.0 bm25\r\nq1 Q0 b 2 1.0 bm25\r\n")
    other = tmp_path / "other.trec"
    other.write_text("q9 Q0 a 1 2.0 bm25\n")
    qrels = tmp_path / "qrels.txt"
    qrels.write_bytes(codecs.BOM_UTF8 + b"q9 0 a 1\r\n")
    result = tierank(
        "eval", str(run), str(other), "--qrels", str(qrels), "--server", tierank_server
    )
    assert result.returncode == EXIT_NOTHING_MEASURED, result.stderr
    assert result.stderr == (
        f"tierank eval: warning: nothing measured for {run}: none of its queries is labeled (the"
        " run and the labels share no query id)\n"
    )
    rows = {line.split()[0]: line.split() for line in result.stdout.splitlines()[1:]}
    assert rows["run.trec"][1:] == ["NA", "0"] and rows["other.trec"][-1] == "1"
    as_json = tierank("eval", str(run), "--qrels", str(qrels), "--json", "--server", tierank_server)
    assert as_json.returncode == EXIT_NOTHING_MEASURED
    assert json.loads(as_json.stdout)["runs"][0]["measures"]["nDCG@10"]["count"] == 0


def test_agree_on_label_sets_sharing_no_pair(tierank_server: str, tmp_path: Path) -> None:
    # Both label query q1, but not one document of it in common.
    a, b = tmp_path / "a.qrels", tmp_path / "b.qrels"
    a.write_text("q1 0 x 1\nq1 0 y 0\n")
    b.write_bytes(codecs.BOM_UTF8 + b"q1 0 z 1\r\n")
    run = tmp_path / "run.trec"
    run.write_text("q1 Q0 x 1 2.0 bm25\nq1 Q0 z 2 1.0 bm25\n")
    for runs in ((), (str(run),)):
        result = tierank(
            "agree", *runs, "--qrels", str(a), "--qrels", str(b), "--server", tierank_server
        )
        assert result.returncode == EXIT_NOTHING_MEASURED, result.stderr
        assert result.stderr == (
            "tierank agree: warning: no (query, document) pair is labeled by both A and B (2"
            " only by A, 1 only by B): no agreement to measure\n"
        )
        assert result.stdout.startswith("pairs labeled by both: 0 (only A: 2, only B: 1)")
        assert "confusion matrix" not in result.stdout  # there is none
    assert " run.trec " in result.stdout  # the runs are still compared
