"""`tierank eval`, `agree` and `qrels` as a user runs them: subprocesses against a server."""

from __future__ import annotations

import json

import pytest
from eval_service_support import BM25_RUN, DL_QRELS, DL_RUNS
from job_helpers import tierank

from tierank.evaluation import evaluate, labels_from_grade_levels, parse_qrels, read_qrels, read_run


@pytest.mark.usefixtures("shared_data")
async def test_eval_json_matches_the_pure_functions(server_address) -> None:
    result = await tierank(
        "eval", str(BM25_RUN), str(DL_RUNS[1]), "--qrels", str(DL_QRELS),
        "-m", "nDCG@10", "-m", "RR(rel=2)", "--json", "--server", server_address,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    qrels = read_qrels(DL_QRELS)
    for entry, path in zip(report["runs"], (BM25_RUN, DL_RUNS[1]), strict=True):
        assert entry["run"] == str(path)
        expected = evaluate(["nDCG@10", "RR(rel=2)"], qrels, read_run(path)).aggregate
        assert {m: v["mean"] for m, v in entry["measures"].items()} == {
            str(m): a.mean for m, a in expected.items()
        }
    assert round(report["runs"][0]["measures"]["nDCG@10"]["mean"], 4) == 0.5058


@pytest.mark.usefixtures("shared_data")
async def test_eval_table_and_bad_input(server_address, tmp_path) -> None:
    table = await tierank(
        "eval", str(BM25_RUN), "--qrels", str(DL_QRELS), "--server", server_address
    )
    assert table.returncode == 0, table.stderr
    assert "nDCG@10" in table.stdout and "0.5058" in table.stdout
    bad = tmp_path / "bad.qrels"
    bad.write_text("1 0 a 1\n1 0 a 2\n")
    rejected = await tierank("eval", str(BM25_RUN), "--qrels", str(bad), "--server", server_address)
    assert rejected.returncode == 2
    assert f"{bad}:2: document 'a' judged twice" in rejected.stderr


async def test_qrels_export_and_agreement_over_a_job(
    server_address, run_job, make_spec, oracle_judge, tmp_path
) -> None:
    job = await run_job(make_spec(n=10, judges=[oracle_judge(noise=0.0)]))
    exported = await tierank(
        "qrels", "--job", f"q1={job.name}", "--mapping", "levels", "--server", server_address
    )
    assert exported.returncode == 0, exported.stderr
    tiers = [list(t.candidate_ids) for t in job.tiers]
    assert parse_qrels(exported.stdout.splitlines()) == {"q1": labels_from_grade_levels(tiers)}
    assert "10 documents labeled" in exported.stderr

    human = tmp_path / "human.qrels"
    human.write_text("".join(f"q1 0 c{i:03d} {3 - i // 3}\n" for i in range(10)))
    run_a = tmp_path / "a.trec"
    run_a.write_text("".join(f"q1 Q0 c{i:03d} {i + 1} {10 - i} a\n" for i in range(10)))
    run_b = tmp_path / "b.trec"
    run_b.write_text("".join(f"q1 Q0 c{i:03d} {10 - i} {i} b\n" for i in range(10)))
    agreed = await tierank(
        "agree", str(run_a), str(run_b), "--qrels", str(human), "--job", f"q1={job.name}",
        "--mapping", "levels", "--json", "--server", server_address,
    )  # fmt: skip
    assert agreed.returncode == 0, agreed.stderr
    report = json.loads(agreed.stdout)
    assert report["shared_pairs"] == 10
    assert report["systems"]["query_count"] == 1
    assert [s["run"] for s in report["systems"]["scores"]] == [str(run_a), str(run_b)]

    usage = await tierank("agree", "--qrels", str(human), "--server", server_address)
    assert usage.returncode == 2 and "exactly two label sets" in usage.stderr


def test_every_flag_has_help() -> None:
    from tierank.client.cli import build_parser

    subcommands = build_parser()._subparsers._group_actions[0].choices  # type: ignore[union-attr]
    for name in ("eval", "agree", "qrels"):
        for action in subcommands[name]._actions:
            assert action.help, f"tierank {name} {action.option_strings or action.dest}"
