"""Each server setting is declared once (server/settings.py): its flag and its environment
variable give the same value through the same check, the dataclass and the command line share
their defaults, and README.md's table says what the declarations say."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.client.cli_process import REPO_ROOT, TIERANK, tierank
from tierank.client.commands._shared import EMBEDDED_SERVER_ENV
from tierank.server.app import background_server
from tierank.server.settings import (
    ENVIRONMENT_ONLY,
    ServerSettings,
    declaration,
    declarations,
    from_args,
)

SERVE = (sys.executable, "-m", "tierank.server", "--listen", "127.0.0.1:0", "--db", "t.db")
SETTINGS = [name for name, _ in declarations()]
# A value other than the default, as typed, for each setting (a switch: its variable's value).
EXAMPLES = {
    "listen": "0.0.0.0:6000",
    "db": "postgresql://ops@db.example:5432/tierank",
    "db_pool_size": "3",
    "db_statement_timeout_s": "2.5",
    "lease_s": "20",
    "sqlite_synchronous": "NORMAL",
    "judges_config": "judges.toml",
    "max_message_mb": "8",
    "shutdown_grace_s": "0",
    "metrics_listen": "127.0.0.1:9090",
    "otlp_endpoint": "http://127.0.0.1:4317",
    "trace_content": "on",
    "ready_file": "ready",
    "log_level": "debug",
    "log_format": "console",
    "auth": "keys",
    "allow_unauthenticated": "1",
    "reflection": "off",
    "tls_cert": "server.crt",
    "tls_key": "server.key",
    "tls_client_ca": "clients.crt",
    "resume_jobs": "off",
    "stdin_eof": "stop",
}


def _one_line(stderr: str) -> str:
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, stderr
    return lines[0]


@pytest.mark.parametrize(
    ("variable", "value", "line"),
    [
        (
            "TIERANK_SQLITE_SYNCHRONOUS",
            "OFF",
            "tierank: environment variable TIERANK_SQLITE_SYNCHRONOUS: invalid choice: 'OFF' "
            "(choose from FULL, NORMAL)",
        ),
        (
            "TIERANK_LOG_LEVEL",
            "verbose",
            "tierank: environment variable TIERANK_LOG_LEVEL: invalid choice: 'verbose' "
            "(choose from debug, info, warning, error)",
        ),
        (
            "TIERANK_OTLP_ENDPOINT",
            "127.0.0.1:4317",
            "tierank: environment variable TIERANK_OTLP_ENDPOINT: must be http://HOST:PORT or "
            "https://HOST:PORT, not '127.0.0.1:4317'",
        ),
        (
            "TIERANK_DB_POOL_SIZE",
            "ten",
            "tierank: environment variable TIERANK_DB_POOL_SIZE: must be a whole number of 1 or "
            "more, not 'ten'",
        ),
        (
            "TIERANK_ALLOW_UNAUTHENTICATED",
            "maybe",
            "tierank: environment variable TIERANK_ALLOW_UNAUTHENTICATED: must be 1 or 0 (or "
            "true/false, yes/no, on/off), not 'maybe'",
        ),
    ],
    ids=["sqlite-synchronous", "log-level", "otlp-endpoint", "pool-size", "switch"],
)
def test_a_bad_variable_stops_the_server_in_one_line_naming_it(
    tmp_path: Path, variable: str, value: str, line: str
):
    result = subprocess.run(
        SERVE,
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
        env={**os.environ, variable: value},
    )
    assert result.returncode == 2, result.stderr
    assert _one_line(result.stderr) == line
    assert not (tmp_path / "t.db").exists()


def test_tierank_serve_and_the_embedded_server_refuse_a_bad_variable_too(tmp_path: Path):
    bad = {"TIERANK_LOG_LEVEL": "verbose"}
    rule = "environment variable TIERANK_LOG_LEVEL: invalid choice: 'verbose'"
    served = subprocess.run(
        [*TIERANK, "serve", "--listen", "127.0.0.1:0", "--db", str(tmp_path / "served.db")],
        capture_output=True, text=True, timeout=60, cwd=REPO_ROOT, env={**os.environ, **bad},
    )  # fmt: skip
    assert served.returncode == 2
    assert _one_line(served.stderr).startswith(f"tierank: {rule}")
    embedded = tierank("jobs", "--db", str(tmp_path / "embedded.db"), env=bad)
    assert embedded.returncode == 2
    assert _one_line(embedded.stderr).startswith(f"tierank jobs: {rule}")


def test_a_flag_wins_over_its_variable_which_is_then_not_read():
    settings = from_args(["--log-level", "debug"], environ={"TIERANK_LOG_LEVEL": "verbose"})
    assert settings.log_level == "debug"


def test_an_empty_variable_counts_as_unset():
    empty = {declared.env: "" for _, declared in declarations()}
    assert from_args([], environ=empty) == from_args([], environ={})


@pytest.mark.parametrize("name", SETTINGS)
def test_a_variable_gives_what_its_flag_gives(name: str):
    declared = declaration(name)
    assert name in EXAMPLES, f"give the setting {name} an example value in this test"
    text = EXAMPLES[name]
    flag = [declared.flag] if declared.switch else [declared.flag, text]
    by_flag = from_args(flag, environ={})
    assert by_flag == from_args([], environ={declared.env: text})
    assert getattr(by_flag, name) != getattr(ServerSettings(), name)
    # Nothing else moved.
    assert by_flag == ServerSettings(**{name: getattr(by_flag, name)})


@pytest.mark.parametrize(
    ("name", "text"),
    [
        ("sqlite_synchronous", "normal"),
        ("max_message_mb", "1001"),
        ("lease_s", "nan"),
        ("db_statement_timeout_s", "-1"),
        ("listen", "127.0.0.1:99999"),
        ("db", "mysql://db.example/tierank"),
        ("reflection", "yes"),
    ],
)
def test_a_variable_is_refused_for_what_its_flag_is_refused_for(
    name: str, text: str, capsys: pytest.CaptureFixture[str]
):
    declared = declaration(name)
    with pytest.raises(SystemExit) as by_flag:
        from_args([declared.flag, text], environ={})
    flag_line = _one_line(capsys.readouterr().err)
    with pytest.raises(SystemExit) as by_variable:
        from_args([], environ={declared.env: text})
    variable_line = _one_line(capsys.readouterr().err)
    assert by_flag.value.code == by_variable.value.code == 2
    flag_rule = flag_line.removeprefix(f"tierank: argument {declared.flag}: ")
    variable_rule = variable_line.removeprefix(f"tierank: environment variable {declared.env}: ")
    assert flag_rule == variable_rule != flag_line


async def test_the_default_database_is_the_command_lines(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.chdir(tmp_path)  # where a relative default would land
    default = Path(os.environ["XDG_DATA_HOME"]) / "tierank" / "tierank.db"
    assert ServerSettings().db == from_args([], environ={}).db == str(default)
    assert from_args([], environ={}) == ServerSettings()
    async with background_server(ServerSettings(listen="127.0.0.1:0")):
        assert default.exists()
    assert list(tmp_path.iterdir()) == []


def _readme_rows() -> dict[str, tuple[str, str]]:
    """README.md's table of settings: each variable's flag and default, as written."""
    text = (REPO_ROOT / "README.md").read_text(encoding="utf-8")
    table = text.partition("<!-- settings table")[2].partition("<!-- end of settings table")[0]
    rows: dict[str, tuple[str, str]] = {}
    for line in table.splitlines()[3:]:
        flag, env, default, _ = (cell.strip() for cell in line.strip("|").split(" | ", 3))
        rows[env.strip("`")] = (flag.strip("`"), default)
    return rows


@pytest.mark.parametrize("name", SETTINGS)
def test_the_readme_table_gives_each_setting_its_flag_and_default(name: str):
    declared = declaration(name)
    assert _readme_rows().get(declared.env) == (declared.flag, declared.shown_default)
    # A default written as a value is the value the settings have.
    if match := re.fullmatch(r"`([^`$]*)`", declared.shown_default):
        assert declared.check(match[1]) == getattr(ServerSettings(), name)


def test_the_readme_table_is_the_declarations_and_nothing_else():
    rows = _readme_rows()
    declared = {d.env for _, d in declarations()} | {v.env for v in ENVIRONMENT_ONLY}
    assert set(rows) == declared
    written = subprocess.run(
        [sys.executable, str(REPO_ROOT / "scripts" / "settings_table.py"), "--check"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert written.returncode == 0, written.stderr


def test_serve_help_names_every_flag_and_variable():
    shown = tierank("serve", "--help")
    assert shown.returncode == 0
    for _, declared in declarations():
        assert declared.flag in shown.stdout and declared.env in shown.stdout


def test_the_variables_the_embedded_server_is_spared_are_server_settings():
    """The client cannot import the server: its list of the server's variables is checked here."""
    assert set(EMBEDDED_SERVER_ENV) <= {declared.env for _, declared in declarations()}
