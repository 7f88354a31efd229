"""Flags the command line names as the user gave them (issue 34, items 15, 17 and 19): --db is
never silently ignored for a server, a bound the server enforces is reported by the flag that
set it, and `study run` has --allow-unqualified-judges, which its refusal names."""

from __future__ import annotations

from pathlib import Path

from cli_process import POOL, QUERY, tierank, unused_address
from test_cli_study import write_collection

EXIT_USAGE = 2


def test_server_and_db_together_are_refused(tmp_path: Path) -> None:
    db = tmp_path / "t.db"
    for command in (("jobs",), ("study", "list"), ("rank", POOL, "--query", QUERY)):
        result = tierank(*command, "--server", unused_address(), "--db", str(db))
        assert result.returncode == EXIT_USAGE, (command, result.stderr)
        assert "--server and --db exclude each other" in result.stderr
    assert not db.exists()


def test_db_wins_over_the_server_variable(tmp_path: Path) -> None:
    # $TIERANK_SERVER may be set for other commands; an explicit --db names the database to
    # use, as the admin commands already had it.
    env = {"TIERANK_SERVER": unused_address(), "TIERANK_CONNECT_TIMEOUT": "1"}
    db = tmp_path / "t.db"
    listed = tierank("jobs", "--db", str(db), env=env)
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout == "no jobs\n"
    ranked = tierank("rank", POOL, "--query", QUERY, "--db", str(db), "--format", "trec", env=env)
    assert ranked.returncode == 0, ranked.stderr
    _header, job = tierank("jobs", "--db", str(db), env=env).stdout.splitlines()
    assert job.split()[1] == "succeeded"


def test_a_bound_the_server_enforces_is_named_by_its_flag(
    tierank_server: str, tmp_path: Path
) -> None:
    paths = write_collection(tmp_path, queries=1, docs=3)
    inputs = ("--topics", str(paths["topics"]), "--passages", str(paths["passages"]))
    cases = [
        (("rank", POOL, "--query", QUERY, "--k", "1"), "--k: must be between 2 and 20"),
        (("rank", POOL, "--query", QUERY, "--top-k", "31"),
         "--top-k: must not exceed the number of candidates (30)"),
        (("rank", POOL, "--query", QUERY, "--judge", "oracle?temperature=5"),
         "--judge (spec.judges[0].parameters.temperature): must be between 0 and 2"),
        (("study", "run", *inputs, "--run", f"good={paths['good']}", "--k", "1"),
         "--k: must be between 2 and 20"),
        (("study", "run", *inputs, "--run", f"good={paths['good']}", "--measure", "nDCG@x"),
         "--measure (spec.measures[0]): "),
        # The judging flags are rank's, sent as rank sends them (issue 36).
        (("study", "run", *inputs, "--run", f"good={paths['good']}", "--quorum", "3"),
         "--quorum: must be between 1 and the number of judges"),
        (("study", "run", *inputs, "--run", f"good={paths['good']}", "--max-in-flight", "65"),
         "--max-in-flight: must be between 1 and 64"),
        # Budgets are checked alike by both commands, before anything is sent.
        (("rank", POOL, "--query", QUERY, "--max-cost", "-1"),
         "--max-cost must be a number, 0 or more (0: unlimited)"),
        (("study", "run", *inputs, "--run", f"good={paths['good']}", "--max-cost", "-1"),
         "--max-cost must be a number, 0 or more (0: unlimited)"),
    ]  # fmt: skip
    for command, message in cases:
        result = tierank(*command, "--server", tierank_server)
        assert result.returncode == EXIT_USAGE, (command, result.stderr)
        assert result.stderr.startswith(f"tierank {command[0]}: {message}"), result.stderr


def test_study_run_insists_on_an_unqualified_judge_with_its_own_flag(tmp_path: Path) -> None:
    paths = write_collection(tmp_path, queries=2, docs=10)
    db = str(tmp_path / "t.db")
    useless = "oracle?noise=1000"
    qualified = tierank(
        "qualify", "--judge", useless, "--qrels", str(paths["qrels"]), "--topics",
        str(paths["topics"]), "--passages", str(paths["passages"]), "--k", "5", "--db", db,
    )  # fmt: skip
    assert qualified.returncode == 5, qualified.stderr  # found no better than chance

    def study(*more: str):  # type: ignore[no-untyped-def]
        return tierank(
            "study", "run", "--topics", str(paths["topics"]), "--passages", str(paths["passages"]),
            "--run", f"good={paths['good']}", "--depth", "4", "--judge", useless,
            "--mapping", "bands", "--db", db, "--output-dir", str(tmp_path / "out"), *more,
        )  # fmt: skip

    refused = study()
    assert refused.returncode == 1, refused.stderr
    assert "no better than chance" in refused.stderr
    assert refused.stderr.rstrip().endswith("`tierank study run --allow-unqualified-judges`")
    assert "tierank rank" not in refused.stderr
    insisted = study("--allow-unqualified-judges")
    assert insisted.returncode in (0, 4), insisted.stderr
    assert (tmp_path / "out" / "report.json").exists()
