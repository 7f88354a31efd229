"""Small things a new user ran into (issue 22, item 27)."""

from __future__ import annotations

from cli_process import POOL, QUERY, job_name_in, tierank

EXIT_USAGE = 2


def test_qualify_help_shows_a_plain_percent_sign() -> None:
    result = tierank("qualify", "--help")
    assert result.returncode == 0
    text = " ".join(result.stdout.split())
    assert "95% intervals" in text and "%%" not in text


def test_rubrics_takes_a_preset_as_every_rubric_option_names_it(tierank_server: str) -> None:
    plain = tierank("rubrics", "context-relevance", "--server", tierank_server)
    assert plain.returncode == 0 and plain.stdout.strip()
    for spelling in (
        "preset:context-relevance",
        "context-relevance@1",
        "preset:context-relevance@1",
    ):
        named = tierank("rubrics", spelling, "--server", tierank_server)
        assert (named.returncode, named.stdout) == (0, plain.stdout), named.stderr
    later = tierank("rubrics", "preset:context-relevance@9", "--server", tierank_server)
    assert later.returncode == EXIT_USAGE
    assert later.stderr.startswith("tierank rubrics: context-relevance is at version 1;")


def test_no_qualifications_says_so(tmp_path) -> None:
    result = tierank("qualifications", "--db", str(tmp_path / "fresh.db"))
    assert result.returncode == 0, result.stderr
    assert result.stdout == "no qualifications (`tierank qualify` makes one)\n"


def test_job_takes_a_bare_id_as_watch_does(tierank_server: str) -> None:
    ranked = tierank("rank", POOL, "--query", QUERY, "--top-k", "3", "--server", tierank_server)
    name = job_name_in(ranked.stderr)
    bare = name.removeprefix("jobs/")
    by_name = tierank("qrels", "--job", f"q1={name}", "--server", tierank_server)
    by_id = tierank("qrels", "--job", f"q1={bare}", "--server", tierank_server)
    assert by_name.returncode == 0, by_name.stderr
    assert (by_id.returncode, by_id.stdout) == (0, by_name.stdout), by_id.stderr


def test_the_oracles_simulated_latency_is_reported(tierank_server: str) -> None:
    result = tierank(
        "rank", POOL, "--query", QUERY, "--judge", "oracle?latency_ms=250", "--top-k", "3",
        "--server", tierank_server,
    )  # fmt: skip
    verdicts = [line for line in result.stderr.splitlines() if " verdict " in line]
    assert verdicts and all(line.endswith(", 0.25s") for line in verdicts)
