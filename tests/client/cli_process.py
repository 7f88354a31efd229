"""Run the `tierank` command line as a real subprocess (`python -m tierank.client`)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
POOL = str(REPO_ROOT / "examples" / "pool.jsonl")
QUERY = "how do honeybees tell each other where food is"
TIERANK = [sys.executable, "-m", "tierank.client"]


def cli_environment(env: dict[str, str] | None = None) -> dict[str, str]:
    """The test's environment without $TIERANK_SERVER (a test names its server), plus `env`."""
    environment = {k: v for k, v in os.environ.items() if k != "TIERANK_SERVER"}
    return {**environment, **(env or {})}


def tierank(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*TIERANK, *args],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO_ROOT,
        env=cli_environment(env),
    )


def job_name_in(progress: str) -> str:
    """The job's name from `tierank rank`'s progress output (its first line names the job)."""
    return progress.split()[2].rstrip(":")


def unused_address() -> str:
    """A loopback address nothing listens on (the port was free a moment ago)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{probe.getsockname()[1]}"


def rest_of(process: subprocess.Popen[str], timeout: float = 120) -> tuple[str, str]:
    """What `process` still writes to stdout and stderr, once it has exited (killed after
    `timeout` seconds). Not `communicate()`: it reads the pipes' descriptors, so the lines a
    `readline()` had already buffered ahead would be lost."""
    assert process.stdout is not None and process.stderr is not None
    streams = (process.stdout, process.stderr)
    with ThreadPoolExecutor(len(streams)) as readers:
        reads = [readers.submit(stream.read) for stream in streams]
        try:
            process.wait(timeout)
        finally:
            process.kill()  # a no-op once it has exited
        stdout, stderr = (read.result() for read in reads)
    return stdout, stderr
