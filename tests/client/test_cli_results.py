"""What `tierank rank` reports: exit status and warnings, judge options, top-K outputs, --help."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from cli_process import (
    POOL,
    QUERY,
    REPO_ROOT,
    TIERANK,
    cli_environment,
    job_name_in,
    rest_of,
    tierank,
)

from tierank.evaluation.rubric import DEFAULT_RUBRIC


def rank(server: str, *args: str) -> subprocess.CompletedProcess[str]:
    return tierank("rank", POOL, "--query", QUERY, "--server", server, *args)


def test_a_settled_result_exits_0_without_warning(tierank_server: str) -> None:
    result = rank(tierank_server, "--top-k", "5", "--format", "json")
    assert result.returncode == 0, result.stderr
    assert "warning" not in result.stderr


def test_every_judge_failing_exits_3_with_one_warning(tierank_server: str) -> None:
    result = rank(tierank_server, "--judge", "oracle?fail_rate=1", "--format", "trec")
    assert result.returncode == 3, result.stderr
    warnings = [line for line in result.stderr.splitlines() if "warning" in line]
    assert len(warnings) == 1
    assert warnings[0].startswith("tierank rank: warning: no verdict")
    assert "input order" in warnings[0]
    # The result is still written, for whoever wants it.
    assert len(result.stdout.splitlines()) == 30


def test_a_budget_run_out_exits_4_with_one_warning(tierank_server: str) -> None:
    result = rank(tierank_server, "--max-calls", "1", "--format", "json")
    assert result.returncode == 4, result.stderr
    assert json.loads(result.stdout)["completion_reason"] == "budget_exhausted"
    warning = result.stderr.splitlines()[-1]
    assert warning.startswith("tierank rank: warning: provisional result (budget_exhausted)")


def test_a_deadline_passed_exits_4_with_its_own_reason(tierank_server: str) -> None:
    # One slow call at a time: the 1 s deadline passes long before the 30 candidates settle.
    result = rank(
        tierank_server, "--judge", "oracle?latency_ms=400", "--k", "2", "--max-in-flight", "1",
        "--deadline", "1", "--format", "json",
    )  # fmt: skip
    assert result.returncode == 4, result.stderr
    assert json.loads(result.stdout)["completion_reason"] == "deadline_exceeded"
    warning = result.stderr.splitlines()[-1]
    assert warning.startswith("tierank rank: warning: provisional result (deadline_exceeded)")


def test_a_cancelled_job_exits_4_with_one_warning(tierank_server: str) -> None:
    # One call at a time, each slow: the job is still running when the first verdict shows.
    ranking = subprocess.Popen(
        [*TIERANK, "rank", POOL, "--query", QUERY, "--server", tierank_server,
         "--judge", "oracle?latency_ms=300", "--k", "2", "--max-in-flight", "1"],
        cwd=REPO_ROOT, env=cli_environment(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    assert ranking.stderr is not None
    accepted = ranking.stderr.readline()
    name = job_name_in(accepted)
    next(line for line in ranking.stderr if "verdict" in line)
    assert tierank("cancel", name, "--server", tierank_server).returncode == 0
    stdout, stderr = rest_of(ranking, timeout=60)
    assert ranking.returncode == 4, stderr
    assert stderr.splitlines()[-1].startswith(
        "tierank rank: warning: provisional result (cancelled)"
    )
    assert "cancelled" in stdout


def test_judge_options_weight_and_name_from_the_command_line(tierank_server: str) -> None:
    result = rank(
        tierank_server,
        "--judge", "oracle:a?noise=0&weight=2&name=steady&timeout_seconds=30",
        "--judge", "oracle:b?noise=0",
        "--top-k", "3", "--format", "json",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    judges = {j["judge"] for j in json.loads(result.stdout)["stats"]["judges"]}
    assert judges == {"steady", "oracle/b"}


@pytest.mark.parametrize(
    ("judge", "message"),
    [
        ("oracle?temperature=warm", "temperature must be a number, not 'warm'"),
        ("oracle?weight", "expected KEY=VALUE after '?', got 'weight'"),
        ("oracle?reasoning=maybe", "reasoning must be true or false"),
        ("oracle?noise=1&noise=2", "key 'noise' given twice"),
        ("?weight=1", "has no provider"),
    ],
)
def test_bad_judge_syntax_is_a_usage_error_naming_the_key(judge: str, message: str) -> None:
    result = tierank("rank", POOL, "--query", QUERY, "--judge", judge)
    assert result.returncode == 2
    assert message in result.stderr
    assert "Traceback" not in result.stderr


def test_an_unknown_judge_option_reaches_the_server_as_an_option(tierank_server: str) -> None:
    # Any other key is a provider option: the server, which knows each provider's options,
    # names it in its field violation.
    result = rank(tierank_server, "--judge", "oracle?colour=blue")
    assert result.returncode == 2
    assert "colour" in result.stderr


def test_top_k_outputs_show_one_group_outside_the_top_k(tierank_server: str) -> None:
    json_result = rank(tierank_server, "--top-k", "5", "--seed", "1", "--format", "json")
    assert json_result.returncode == 0, json_result.stderr
    summary = json.loads(json_result.stdout)
    tiers = summary["tiers"]
    assert summary["top_k"] == 5
    assert [t["outside_top_k"] for t in tiers] == [False] * (len(tiers) - 1) + [True]
    inside = sum(len(t["candidate_ids"]) for t in tiers[:-1])
    assert inside >= 5
    assert inside + len(tiers[-1]["candidate_ids"]) == 30

    trec = rank(tierank_server, "--top-k", "5", "--seed", "1", "--format", "trec")
    rows = [line.split() for line in trec.stdout.splitlines()]
    assert [r[2] for r in rows] == [i for t in tiers for i in t["candidate_ids"]]
    # One tied score for the whole group beyond the top K, below every score inside it.
    outside_scores = {float(r[4]) for r in rows[inside:]}
    assert outside_scores == {1.0}
    assert min(float(r[4]) for r in rows[:inside]) > 1.0

    table = rank(tierank_server, "--top-k", "5", "--seed", "1")
    assert table.stdout.count("outside top 5") == 1
    # The table is as wide as a pipe's (only passage texts give way); the summary is one line.
    *rows, summary = table.stdout.splitlines()
    assert max(map(len, rows)) <= 120
    assert summary.startswith("succeeded (settled): ")


def test_rank_help_shows_the_default_rubric_and_the_exit_statuses() -> None:
    result = tierank("rank", "--help")
    assert result.returncode == 0
    text = " ".join(result.stdout.split())
    assert DEFAULT_RUBRIC in text
    for status in ("0 the tiers asked for are settled", "3 no judge answered", "4 a provisional"):
        assert status in text
    assert "passage_token_budget" in text


def test_the_python_client_reads_judges_like_the_command_line() -> None:
    probe = (
        "from tierank.client import job_spec\n"
        "spec = job_spec('q', [{'id': 'a', 'text': 'x'}], judges=['oracle?noise=0&weight=2'])\n"
        "print(spec.judges[0].weight, dict(spec.judges[0].parameters.options))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, cwd=REPO_ROOT, timeout=60
    )
    assert result.stdout.strip() == "2.0 {'noise': '0'}", result.stderr
