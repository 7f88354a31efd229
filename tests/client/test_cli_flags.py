"""Flags the command line names as the user gave them (issue 34, items 15, 17 and 19): --db is
never silently ignored for a server, a bound the server enforces is reported by the flag that
set it, and `study run` has --allow-unqualified-judges, which its refusal names."""

from __future__ import annotations

from pathlib import Path

from cli_process import POOL, QUERY, tierank, unused_address

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
