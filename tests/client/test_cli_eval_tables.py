"""`tierank eval` and `agree` tables: run files by short names, counts in good English."""

from __future__ import annotations

from pathlib import Path

from cli_process import POOL, QUERY, job_name_in, tierank

QRELS_A = "1 0 d1 2\n1 0 d2 1\n1 0 d3 0\n"
QRELS_B = "1 0 d1 1\n1 0 d2 2\n1 0 d3 0\n"


def write_runs(root: Path) -> list[Path]:
    runs = []
    for system, order in (("bm25", "d1 d2 d3"), ("splade", "d2 d1 d3")):
        run = root / "experiments" / "2026" / "a-rather-long-directory-name" / f"run.{system}.trec"
        run.parent.mkdir(parents=True, exist_ok=True)
        lines = [
            f"1 Q0 {doc} {rank} {10 - rank} {system}" for rank, doc in enumerate(order.split(), 1)
        ]
        run.write_text("\n".join(lines) + "\n")
        runs.append(run)
    return runs


def test_eval_table_names_runs_by_file_name(tierank_server: str, tmp_path: Path) -> None:
    runs = write_runs(tmp_path)
    qrels = tmp_path / "a.qrels"
    qrels.write_text(QRELS_A)
    result = tierank("eval", *map(str, runs), "--qrels", str(qrels), "--server", tierank_server)
    assert result.returncode == 0, result.stderr
    assert "run.bm25.trec" in result.stdout and "run.splade.trec" in result.stdout
    assert "a-rather-long-directory-name" not in result.stdout
    assert max(map(len, result.stdout.splitlines())) < 80


def test_agree_says_one_query(tierank_server: str, tmp_path: Path) -> None:
    runs = write_runs(tmp_path)
    (tmp_path / "a.qrels").write_text(QRELS_A)
    (tmp_path / "b.qrels").write_text(QRELS_B)
    result = tierank(
        "agree", *map(str, runs), "--qrels", str(tmp_path / "a.qrels"),
        "--qrels", str(tmp_path / "b.qrels"), "--server", tierank_server,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "on 1 query" in result.stdout
    assert "1 queries" not in result.stdout
    assert "a-rather-long-directory-name" not in result.stdout


def test_anchor_judge_takes_options_like_rank(tierank_server: str) -> None:
    ranked = tierank("rank", POOL, "--query", QUERY, "--server", tierank_server, "--top-k", "3")
    assert ranked.returncode == 0, ranked.stderr
    name = job_name_in(ranked.stderr)
    result = tierank(
        "qrels", "--job", f"1={name}", "--mapping", "pointwise",
        "--anchor-judge", "oracle?noise=0", "--anchor-option", "score_key=score",
        "--server", tierank_server,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "pointwise calls" in result.stderr
    assert {line.split()[2] for line in result.stdout.splitlines()} >= {"bee-03"}
    bad = tierank("qrels", "--job", f"1={name}", "--mapping", "pointwise",
                  "--anchor-judge", "oracle?noise", "--server", tierank_server)  # fmt: skip
    assert bad.returncode == 2
    assert "expected KEY=VALUE" in bad.stderr
