"""What a server process writes for its operator: a log of JSON lines only, whatever library
speaks (psycopg on a graceful SIGTERM included), and the ports it chose in the ready file."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

SERVE = (sys.executable, "-m", "tierank.server", "--listen", "127.0.0.1:0")


def _serve_until_sigterm(tmp_path: Path, *args: str) -> tuple[list[str], str]:
    """Start a server, wait for its ready file, SIGTERM it; its ready file's lines and its log."""
    ready = tmp_path / "ready"
    server = subprocess.Popen(
        [*SERVE, "--ready-file", str(ready), *args],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        give_up = time.monotonic() + 60
        content = previous = ""
        while not content or content != previous:  # two equal reads: the file is written
            assert server.poll() is None and time.monotonic() < give_up, "the server never served"
            time.sleep(0.05)
            previous, content = content, ready.read_text() if ready.exists() else ""
        lines = content.splitlines()
        _check_metrics(lines)
    finally:
        server.send_signal(signal.SIGTERM)
        _, log = server.communicate(timeout=30)
    assert server.returncode == 0, log
    return lines, log


def _check_metrics(lines: list[str]) -> None:
    """While the server serves: the metrics address of its ready file (if any) answers."""
    if len(lines) > 1:
        with urllib.request.urlopen(f"http://{lines[1]}/metrics", timeout=10) as answer:
            assert b"tierank_jobs_created_total" in answer.read()


def _records(log: str) -> list[dict[str, object]]:
    """Every line of the log as JSON: one that is not fails the test, naming it."""
    records = []
    for line in log.splitlines():
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            raise AssertionError(f"a log line that is not JSON: {line!r}") from None
    return records


def test_a_graceful_sigterm_on_postgres_logs_json_lines_only(schema_url: str, tmp_path: Path):
    # SIGTERM drains: the replica beats once more at once, then the manager and the pool close
    # (a beat cancelled half-way made psycopg print two plain lines about the lost connection).
    _, log = _serve_until_sigterm(tmp_path, "--db", schema_url)
    records = _records(log)
    assert [r["event"] for r in records] == ["serving", "shutting down", "stopped"], records


def test_a_metrics_port_chosen_at_start_is_logged_and_in_the_ready_file(tmp_path: Path):
    lines, log = _serve_until_sigterm(
        tmp_path, "--db", str(tmp_path / "t.db"), "--metrics-listen", "127.0.0.1:0"
    )
    assert len(lines) == 2
    address, metrics_address = lines
    host, _, port = metrics_address.rpartition(":")
    assert host == "127.0.0.1" and int(port) > 0 and metrics_address != address
    serving = next(r for r in _records(log) if r["event"] == "serving")
    assert serving["address"] == address and serving["metrics_address"] == metrics_address


def test_without_metrics_the_ready_file_holds_the_address_alone(tmp_path: Path):
    lines, _ = _serve_until_sigterm(tmp_path, "--db", str(tmp_path / "t.db"))
    assert len(lines) == 1 and lines[0].startswith("127.0.0.1:")
