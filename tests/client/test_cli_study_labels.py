"""`tierank study` labels as a user meets them, each command a process on an embedded server:
pointwise labels by default, a human sample from a filled-in sheet (BOM, CRLF) or qrels,
`study sample` and `study calibrate`, `--qids`, `--per-query`, bad sample files named by file
and line, and a study no judge answered exiting 3."""

from __future__ import annotations

import json
from pathlib import Path

from cli_process import tierank
from test_cli_study import SYSTEMS, write_collection


def _run(paths: dict[str, Path], db: Path, out: Path, *extra: str, judge: str = "oracle?noise=0.2"):  # type: ignore[no-untyped-def]
    return tierank(
        "study", "run", "--topics", str(paths["topics"]), "--passages", str(paths["passages"]),
        *(f for name in SYSTEMS for f in ("--run", f"{name}={paths[name]}")),
        "--depth", "8", "--top-k", "5", "--judge", judge,
        "--db", str(db), "--output-dir", str(out), *extra,
    )  # fmt: skip


def _grades(paths: dict[str, Path]) -> dict[str, dict[str, int]]:
    grades: dict[str, dict[str, int]] = {}
    for line in paths["qrels"].read_text().splitlines():
        qid, _, doc, grade = line.split()
        grades.setdefault(qid, {})[doc] = int(grade)
    return grades


def test_pointwise_labels_by_default_and_every_flag_of_their_outputs(tmp_path: Path) -> None:
    paths = write_collection(tmp_path)
    per_query = tmp_path / "per-query.tsv"
    result = _run(
        paths, tmp_path / "t.db", tmp_path / "out", "--qids", "q0,q1,q3",
        "--per-query", str(per_query), "--anchor-judge", "oracle?noise=0.5",
    )  # fmt: skip
    assert result.returncode in (0, 4), result.stderr
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    assert report["labels"].startswith("pointwise: oracle")
    assert report["queries"]["total"] == report["queries"]["judged"] == 3
    assert report["interval_method"] == "bootstrap"
    assert 0 < report["cost"]["pointwise_calls"] < report["cost"]["calls"]
    assert len(report["pairs"]) == 3 and {p["better"] for p in report["pairs"]} <= set(SYSTEMS)
    assert "means over the 3 judged queries of 3" in result.stdout
    assert "do not include the judge's own errors" in result.stdout
    assert "every pair, p-values Holm-adjusted over all 3 pairs" in result.stdout
    lines = per_query.read_text().splitlines()
    assert lines[0] == "system\tmeasure\tqid\tvalue"
    assert len(lines) == 1 + 3 * len(SYSTEMS) * len(report["measures"])
    assert {line.split("\t")[2] for line in lines[1:]} == {"q0", "q1", "q3"}
    qrels = (tmp_path / "out" / "qrels.txt").read_text().splitlines()
    assert {line.split()[3] for line in qrels} >= {"0", "3"}, "grades, not positions"


def test_a_sample_sheet_round_trip_calibrates_without_judging_again(tmp_path: Path) -> None:
    paths = write_collection(tmp_path)
    db = tmp_path / "t.db"
    ran = _run(paths, db, tmp_path / "out", "--json")
    assert ran.returncode in (0, 4), ran.stderr
    name = json.loads(ran.stdout)["study"]
    sheet = tmp_path / "sheet.tsv"
    sampled = tierank(
        "study", "sample", name, "--queries", "2", "--seed", "3", "--stratify",
        "--output", str(sheet), "--db", str(db),
    )  # fmt: skip
    assert sampled.returncode == 0, sampled.stderr
    assert "tierank study calibrate" in sampled.stderr
    rows = sheet.read_text().splitlines()
    assert rows[0] == "qid\tdocid\tquery\tpassage\tgrade"
    chosen = {row.split("\t")[0] for row in rows[1:]}
    assert len(chosen) == 2 and all(row.endswith("\t") for row in rows[1:])
    # A person fills the grades in (with Windows line ends and a BOM, and one row left out).
    grades = _grades(paths)
    filled = (
        [rows[0]]
        + [row + str(grades[row.split("\t")[0]][row.split("\t")[1]]) for row in rows[1:-1]]
        + [rows[-1]]
    )
    sheet.write_bytes(b"\xef\xbb\xbf" + "\r\n".join(filled).encode() + b"\r\n")
    calibrated = tierank(
        "study", "calibrate", name, "--human-sample", str(sheet), "--db", str(db),
        "--output-dir", str(tmp_path / "calibrated"), "--json",
    )  # fmt: skip
    assert calibrated.returncode in (0, 4), calibrated.stderr
    report = json.loads(calibrated.stdout)
    assert report["interval_method"] == "ppi"
    assert report["sample"]["queries"] == 2
    assert report["sample"]["judgments"] == len(rows) - 2  # the row left ungraded is skipped
    assert report["cost"] == {
        **json.loads(ran.stdout)["cost"],
        "wall_seconds": report["cost"]["wall_seconds"],
    }
    assert {q["query_id"] for q in report["per_query"] if q["human_labels"]} == chosen
    table = tierank("study", "report", name, "--db", str(db), "--output-dir", str(tmp_path / "r"))
    assert "prediction-powered from the human sample of 2 queries" in table.stdout


def test_a_human_sample_with_the_study_run_and_its_labels_in_qrels(tmp_path: Path) -> None:
    paths = write_collection(tmp_path)
    grades = _grades(paths)
    sample = tmp_path / "sample.qrels"
    sample.write_text("".join(f"q2 0 {d} {g}\n" for d, g in grades["q2"].items()))
    result = _run(paths, tmp_path / "t.db", tmp_path / "out", "--human-sample", str(sample))
    assert result.returncode in (0, 4), result.stderr
    assert "prediction-powered from the human sample of 1 queries" in result.stdout
    labels = [line.split() for line in (tmp_path / "out" / "qrels.txt").read_text().splitlines()]
    assert {d: int(g) for q, _, d, g in labels if q == "q2"} == grades["q2"]


def test_bad_sample_files_are_named_with_their_line(tmp_path: Path) -> None:
    paths = write_collection(tmp_path)
    cases = {
        "q1 0 q1d3 7\n": "sample.qrels:1: grade 7 is outside 0-3",
        "q1 0 q1d3 2\nq9 0 x 1\n": "sample.qrels:2: query 'q9' is not in the study",
        "q1 0 q1d3 2\nq1 0 q1d3 1\n": "sample.qrels:2: q1 q1d3 is graded twice",
        "qid\tdocid\tquery\tpassage\tgrade\nq1\tq1d3\tt\tp\t\n": "no graded judgment",
        "": "the file is empty",
    }
    for content, message in cases.items():
        sample = tmp_path / "sample.qrels"
        sample.write_text(content)
        result = _run(paths, tmp_path / "t.db", tmp_path / "out", "--human-sample", str(sample))
        assert result.returncode == 2, (content, result.stderr)
        assert message in result.stderr, (content, result.stderr)
    refused = _run(paths, tmp_path / "t.db", tmp_path / "out", "--qids", "q1,q77")
    assert refused.returncode == 2 and "--qids" in refused.stderr and "q77" in refused.stderr


def test_a_study_no_judge_answered_exits_3_and_says_why(tmp_path: Path) -> None:
    paths = write_collection(tmp_path, queries=2, docs=8)
    result = _run(paths, tmp_path / "t.db", tmp_path / "out", judge="oracle?noise=0.2&fail_rate=1")
    assert result.returncode == 3, result.stderr
    assert "no judge answered" in result.stderr
    assert "oracle simulated a bad answer" in result.stderr
    assert (tmp_path / "out" / "qrels.txt").read_text() == "", "no label is invented"
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    assert report["state"] == "failed" and report["queries"]["judged"] == 0
