"""`tierank fill` as a user runs it: a subprocess against a real server (or its own embedded
one), with the offline oracle as the judge."""

from __future__ import annotations

import json
from pathlib import Path

from cli_process import tierank

QUERIES = ("q1", "q2")
JUDGED = 6  # per query: documents d0..d5 are judged, d6..d8 are holes
DOCS = 9


def write_inputs(directory: Path, *, unscored_holes: int = 0) -> dict[str, Path]:
    """Human qrels with holes, one run, topics and passages whose metadata `score` is the
    oracle's hidden grade: the human grade where there is one, 3 for a hole. The first
    `unscored_holes` holes of each query have no score, so the oracle fails on them."""
    qrels, run, passages = [], [], []
    for q in QUERIES:
        for i in range(DOCS):
            doc = f"{q}-d{i}"
            run.append(f"{q} Q0 {doc} {i + 1} {DOCS - i} sys\n")
            metadata = {"score": i % 4} if i < JUDGED else {"score": 3}
            if i < JUDGED:
                qrels.append(f"{q} 0 {doc} {i % 4}\n")
            elif i - JUDGED < unscored_holes:
                metadata = {}
            passages.append(json.dumps({"id": doc, "text": f"text {doc}", "metadata": metadata}))
    files = {
        "qrels": ("human.qrels", "".join(qrels)),
        "run": ("sys.trec", "".join(run)),
        "topics": ("topics.tsv", "".join(f"{q}\tquestion {q}\n" for q in QUERIES)),
        "passages": ("passages.jsonl", "\n".join(passages) + "\n"),
    }
    paths = {}
    for key, (name, content) in files.items():
        paths[key] = directory / name
        paths[key].write_text(content)
    return paths


def fill_args(paths: dict[str, Path], *more: str) -> list[str]:
    return [
        "fill",
        "--qrels", str(paths["qrels"]),
        "--run", str(paths["run"]),
        "--topics", str(paths["topics"]),
        "--passages", str(paths["passages"]),
        "--judge", "oracle?noise=0",
        *more,
    ]  # fmt: skip


def test_fill_writes_the_qrels_and_reports_held_in_agreement(
    tierank_server: str, tmp_path: Path
) -> None:
    paths = write_inputs(tmp_path)
    result = tierank(*fill_args(paths, "--held-in", "8", "--server", tierank_server))
    assert result.returncode == 0, result.stderr
    holes = "".join(f"{q} 0 {q}-d{i} 3\n" for q in QUERIES for i in range(JUDGED, DOCS))
    assert result.stdout == paths["qrels"].read_text() + holes
    report = result.stderr
    assert "filled 6 of 6 holes in the top 10 of 1 run (2 queries)" in report
    assert "judge calls: 14 (0 cached, 0 failed)" in report
    assert "held-in agreement on 8 human-judged pairs" in report
    assert "binary (grade >= 2) 1.000 [0.676, 1.000] (8/8), kappa 1.0000" in report
    assert "rows: human grade, columns: judge's grade" in report


def test_fill_json_report_with_the_qrels_in_a_file(tierank_server: str, tmp_path: Path) -> None:
    paths = write_inputs(tmp_path)
    output = tmp_path / "filled.qrels"
    result = tierank(
        *fill_args(paths, "--depth", "7", "--format", "json", "--output", str(output)),
        "--server", tierank_server,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert output.read_text() == paths["qrels"].read_text() + "q1 0 q1-d6 3\nq2 0 q2-d6 3\n"
    assert (report["holes"], report["filled"], report["failures"]) == (2, 2, [])
    assert report["per_query"] == {q: {"grades": {"3": 1}, "failed": 0} for q in QUERIES}
    held_in = report["held_in"]
    # Fewer judged pairs in the tops than the default 200 asked for: all 12 of them.
    assert (held_in["asked"], held_in["pairs"]) == (200, 2 * JUDGED)
    assert held_in["kappa"] == 1.0 and held_in["quadratic_weighted_kappa"] == 1.0
    assert held_in["binary_agreement"]["count"] == held_in["binary_agreement"]["total"] == 12
    assert held_in["confusion"]["grades"] == [0, 1, 2, 3]
    assert report["stats"]["calls"] == 2 + 2 * JUDGED
    no_held_in = tierank(
        *fill_args(paths, "--held-in", "0", "--format", "json", "--output", str(output)),
        "--server", tierank_server,
    )  # fmt: skip
    assert json.loads(no_held_in.stdout)["held_in"] is None


def test_holes_the_judge_cannot_grade_stay_holes_and_say_so(
    tierank_server: str, tmp_path: Path
) -> None:
    some = write_inputs(tmp_path, unscored_holes=1)
    partial = tierank(*fill_args(some, "--held-in", "0", "--server", tierank_server))
    assert partial.returncode == 4, partial.stderr
    assert "filled 4 of 6 holes" in partial.stderr
    assert "warning: 2 holes of 6 could not be graded and are still holes" in partial.stderr
    assert "q1 0 q1-d6" not in partial.stdout and "q1 0 q1-d7 3" in partial.stdout
    every = write_inputs(tmp_path, unscored_holes=DOCS - JUDGED)
    none = tierank(*fill_args(every, "--held-in", "0", "--server", tierank_server))
    assert none.returncode == 3, none.stderr
    assert "the judge graded none of 6 holes" in none.stderr
    assert none.stdout == every["qrels"].read_text()


def test_usage_and_server_side_errors(tierank_server: str, tmp_path: Path) -> None:
    paths = write_inputs(tmp_path)
    json_to_stdout = tierank(*fill_args(paths, "--format", "json", "--server", tierank_server))
    assert json_to_stdout.returncode == 2
    assert "give the qrels --output" in json_to_stdout.stderr
    negative = tierank(*fill_args(paths, "--held-in", "-1", "--server", tierank_server))
    assert negative.returncode == 2 and "must not be negative" in negative.stderr
    too_many = tierank(*fill_args(paths, "--held-in", "20000", "--server", tierank_server))
    assert too_many.returncode == 2
    assert "held_in_sample" in too_many.stderr and "between 0 and 10000" in too_many.stderr
    no_judge = tierank(*fill_args(paths)[:-2], "--server", tierank_server)
    assert no_judge.returncode == 2 and "--judge" in no_judge.stderr


def test_fill_on_the_embedded_server(tmp_path: Path) -> None:
    paths = write_inputs(tmp_path)
    result = tierank(*fill_args(paths, "--db", str(tmp_path / "embedded.db")))
    assert result.returncode == 0, result.stderr
    assert result.stdout.count(" 3\n") == 6 + paths["qrels"].read_text().count(" 3\n")


def test_every_fill_flag_has_help() -> None:
    from tierank.client.cli import build_parser

    subcommands = build_parser()._subparsers._group_actions[0].choices  # type: ignore[union-attr]
    for action in subcommands["fill"]._actions:
        assert action.help, f"tierank fill {action.option_strings or action.dest}"
