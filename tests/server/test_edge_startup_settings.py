"""A --db or --judges-config the server cannot use stops it with one line that names the
problem, for `tierank serve` and for every command that opens a database itself."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.client.cli_process import tierank

pytestmark = pytest.mark.long_module

SERVE = (sys.executable, "-m", "tierank.server", "--listen", "127.0.0.1:0")


def _serve(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*SERVE, *args], capture_output=True, text=True, timeout=60, cwd=cwd)


def _one_line(result: subprocess.CompletedProcess[str]) -> str:
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    return lines[0]


@pytest.fixture
def not_a_database(tmp_path: Path) -> Path:
    path = tmp_path / "notes.txt"
    path.write_text("not a database\n")
    return path


@pytest.mark.parametrize(
    ("db", "status", "named"),
    [
        ("{tmp}", 1, "is a directory"),
        ("{tmp}/notes.txt/tierank.db", 1, "is a file, not a directory"),
        ("{tmp}/notes.txt", 1, "not a tierank database"),
        ("mysql://db.example/tierank", 2, "unknown scheme 'mysql://'"),
        ("", 2, "--db: is empty"),
        ("postgresql://ops@db.example:99999/tierank", 2, "port '99999'"),
        ("postgresql://[::1/tierank", 2, "not a PostgreSQL URL"),
    ],
    ids=["directory", "under-a-file", "not-sqlite", "scheme", "empty", "port", "malformed-url"],
)
def test_serve_with_a_db_it_cannot_use_says_why_in_one_line(
    tmp_path: Path, not_a_database: Path, db: str, status: int, named: str
):
    result = _serve("--db", db.format(tmp=tmp_path), cwd=tmp_path)
    assert result.returncode == status
    line = _one_line(result)
    assert line.startswith("tierank: ") and named in line, line
    # Nothing was made of a mistyped location: no "mysql:" folder, no stray database.
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"]


def test_a_password_in_a_refused_db_url_is_not_repeated(tmp_path: Path):
    result = _serve("--db", "postgresql://ops:hunter2@db.example:notaport/tierank", cwd=tmp_path)
    assert result.returncode == 2
    assert "hunter2" not in result.stderr and "port 'notaport'" in _one_line(result)


@pytest.mark.parametrize(
    ("content", "named"),
    [
        (None, "no such file"),
        ('{"providers": {"openai": ', "not valid JSON: Expecting value: line 2 column 1"),
        ('{"providers": {"opnai": {}}}', "unknown key 'providers.opnai'"),
        ('{"providers": {"openai": {"timeoutt": 3}}}', "unknown key 'providers.openai.timeoutt'"),
        ('{"providers": {"openai": {"timeout_s": "3"}}}', "providers.openai.timeout_s must be"),
        ('{"judges": {}}', "unknown key 'judges'"),
    ],
    ids=["missing", "invalid-json", "provider-typo", "setting-typo", "wrong-type", "section"],
)
def test_serve_with_a_broken_judges_config_names_the_file_and_the_problem(
    tmp_path: Path, content: str | None, named: str
):
    config = tmp_path / "judges.json"
    if content is not None:
        config.write_text(content + "\n")
    result = _serve("--db", str(tmp_path / "t.db"), "--judges-config", str(config), cwd=tmp_path)
    assert result.returncode == 1
    line = _one_line(result)
    assert line.startswith(f"tierank: judges config {config}: ") and named in line, line
    assert not (tmp_path / "t.db").exists(), "a server that cannot serve opens nothing"


@pytest.mark.parametrize(
    "command",
    [
        ("jobs",),
        ("keys", "list"),
        ("tenants", "list"),
        ("db", "status"),
    ],
    ids=lambda c: "-".join(c),
)
def test_commands_that_open_the_db_refuse_a_malformed_one_as_a_usage_error(
    tmp_path: Path, command: tuple[str, ...]
):
    result = tierank(*command, "--db", f"mysql://{tmp_path}/tierank")
    assert result.returncode == 2
    line = _one_line(result)
    assert line.startswith("tierank") and "--db: has the unknown scheme 'mysql://'" in line, line


@pytest.mark.parametrize("command", [("jobs",), ("keys", "list")], ids=lambda c: "-".join(c))
def test_commands_that_open_a_directory_as_the_db_say_so_in_one_line(
    tmp_path: Path, command: tuple[str, ...]
):
    result = tierank(*command, "--db", str(tmp_path))
    assert result.returncode == 1
    line = _one_line(result)
    assert line.startswith(f"tierank {command[0]}: ") and "is a directory" in line, line


@pytest.mark.parametrize(
    ("listen", "status", "named"),
    [
        ("127.0.0.1:99999", 2, "port must be 0-65535"),
        ("notahost", 2, "'notahost' has no port; expected HOST:PORT"),
        ("http://127.0.0.1:50051", 2, "is a URL; expected HOST:PORT"),
        ("::1:50051", 2, "an IPv6 address goes in brackets"),
        ("notahost.invalid:50051", 1, "'notahost.invalid' does not resolve"),
    ],
    ids=["port-range", "no-port", "url", "ipv6", "unknown-host"],
)
def test_serve_on_an_address_it_cannot_listen_on_says_what_is_wrong(
    tmp_path: Path, listen: str, status: int, named: str
):
    result = subprocess.run(
        [sys.executable, "-m", "tierank.server", "--listen", listen, "--db", "t.db"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
    )
    assert result.returncode == status
    line = _one_line(result)
    assert named in line and "authentication" not in line, line
    assert not (tmp_path / "t.db").exists()


def test_a_metrics_port_out_of_range_is_refused(tmp_path: Path):
    result = _serve("--metrics-listen", "127.0.0.1:70000", "--db", "t.db", cwd=tmp_path)
    assert result.returncode == 2
    assert "--metrics-listen: '127.0.0.1:70000': port must be 0-65535" in _one_line(result)


@pytest.mark.parametrize(
    ("server", "status", "named"),
    [
        ("localhost", 2, "server address 'localhost' has no port; expected HOST:PORT"),
        ("http://127.0.0.1:50051", 2, "is a URL; expected HOST:PORT"),
        ("127.0.0.1:99999", 2, "port must be 1-65535"),
        ("unknown.invalid:1", 1, "cannot reach unknown.invalid:1: the host name"),
    ],
    ids=["no-port", "url", "port-range", "unknown-host"],
)
@pytest.mark.parametrize("command", [("jobs",), ("keys", "list")], ids=lambda c: "-".join(c))
def test_a_server_address_that_cannot_answer_is_refused_at_once(
    command: tuple[str, ...], server: str, status: int, named: str
):
    # A well-formed address with no server yet would be waited for, here 30 s.
    started = time.monotonic()
    result = tierank(*command, "--server", server, env={"TIERANK_CONNECT_TIMEOUT": "30"})
    assert time.monotonic() - started < 20, "refused without waiting for a server"
    assert result.returncode == status
    line = _one_line(result)
    assert line.startswith(f"tierank {command[0]}: ") and named in line, line
