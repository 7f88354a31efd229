"""Run a tierank server as a child process on loopback: the CLI's embedded mode, and tests.

Only the server's command line is used (`python -m tierank.server ...`), never its Python
package, so the client stays independent of the server's code.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path

# How the server is run (`tierank serve` execs it too): its command line, not its package.
SERVER_MODULE = "tierank.server"
SERVER_COMMAND = (sys.executable, "-m", SERVER_MODULE)
_POLL_SECONDS = 0.02
# Traceback decoration and exception-group frames, which carry no reason of their own.
_FRAME_NOISE = " \t|+"
_EXCEPTION_PREFIX = re.compile(r"^(?:[A-Za-z_][\w]*\.)*[A-Za-z_]\w*(?:Error|Exception|Group):\s*")
_FAILURE_LEVELS = frozenset({"error", "critical", "exception", "fatal"})
# The server's status for a command line it refuses (argparse's).
_EXIT_USAGE = 2


class LocalServerError(RuntimeError):
    """The server process exited or stayed silent instead of becoming ready.

    The message is one line with the server's own reason; `refused_arguments` is set when the
    server refused its command line (exit status 2), e.g. a --db that names no database.
    """

    def __init__(self, message: str, *, refused_arguments: bool = False) -> None:
        super().__init__(message)
        self.refused_arguments = refused_arguments


class LocalServer:
    """`with LocalServer(db=path) as server:` gives a serving `server.address` ("host:port").

    The server writes its bound address to a ready file once it serves; its stderr goes to a
    log file so that a failed start can be explained. Stopping sends SIGTERM (graceful), then
    SIGKILL if it does not exit in time. Its standard input is a pipe that only this process
    holds open (`--stdin-eof stop`): should this process die without stopping it (kill -9),
    the pipe ends and the server stops too, rather than outlive its command unseen. `env` is
    laid over this process's environment; a variable mapped to None is left out.
    """

    def __init__(
        self,
        *,
        db: Path | str | None = None,
        listen: str = "127.0.0.1:0",
        extra_args: tuple[str, ...] = (),
        env: Mapping[str, str | None] | None = None,
        startup_timeout: float = 30.0,
    ) -> None:
        self.db = db
        self.listen = listen
        self.extra_args = extra_args
        self.env = env
        self.startup_timeout = startup_timeout
        self.address = ""
        # Where it serves /metrics, when started with --metrics-listen; "" otherwise.
        self.metrics_address = ""
        self._workdir: tempfile.TemporaryDirectory[str] | None = None
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def log_path(self) -> Path:
        if self._workdir is None:
            raise LocalServerError("server not started")
        return Path(self._workdir.name) / "server.log"

    @property
    def pid(self) -> int | None:
        return None if self._process is None else self._process.pid

    def __enter__(self) -> LocalServer:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def start(self) -> str:
        """Start the process and wait until it serves; returns its address."""
        self._workdir = tempfile.TemporaryDirectory(prefix="tierank-server-")
        ready_file = Path(self._workdir.name) / "ready"
        command = [*SERVER_COMMAND, "--listen", self.listen]
        command += ["--ready-file", str(ready_file), "--stdin-eof", "stop", *self.extra_args]
        if self.db is not None:
            command += ["--db", str(self.db)]
        with open(self.log_path, "wb") as log:
            self._process = subprocess.Popen(
                command,
                # Never written to: its end is what tells the server that this process is gone.
                # (Python's pipes are not inherited by this process's other children.)
                stdin=subprocess.PIPE,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=_environment(self.env or {}),
                # Not in the terminal's process group: Ctrl-C reaches the command alone, which
                # then decides what becomes of its job before it stops the server itself.
                start_new_session=True,
            )
        try:
            # Its first line is the gRPC address, a second one the metrics address.
            self.address, _, metrics = self._wait_for_ready(ready_file).partition("\n")
            self.metrics_address = metrics.strip()
        except BaseException:
            self.stop()
            raise
        return self.address

    def stop(self, timeout: float = 10.0) -> int | None:
        """Stop gracefully; returns the exit code (None if it was never started)."""
        process, self._process = self._process, None
        returncode = None
        if process is not None:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
                try:
                    process.wait(timeout)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait()
            returncode = process.returncode
            if process.stdin is not None:
                process.stdin.close()
        if self._workdir is not None:
            self._workdir.cleanup()
            self._workdir = None
        return returncode

    def log_tail(self, lines: int = 20) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except (OSError, LocalServerError):
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def _wait_for_ready(self, ready_file: Path) -> str:
        """The ready file's content, once the server has written it."""
        assert self._process is not None
        give_up_at = time.monotonic() + self.startup_timeout
        previous = ""
        while time.monotonic() < give_up_at:
            if self._process.poll() is not None:
                log = self.log_tail()
                if self._process.returncode == _EXIT_USAGE:
                    reason = failure_reason(log).removeprefix("tierank: ")
                    raise LocalServerError(reason, refused_arguments=True)
                raise LocalServerError(
                    f"tierank server exited with code {self._process.returncode} before it was"
                    f" ready: {failure_reason(log)}"
                )
            content = ready_file.read_text().strip() if ready_file.exists() else ""
            # Two equal reads in a row: the server has finished writing the file.
            if content and content == previous:
                return content
            previous = content
            time.sleep(_POLL_SECONDS)
        log = self.log_tail()
        raise LocalServerError(
            f"tierank server not ready after {self.startup_timeout:.0f}s: {failure_reason(log)}"
        )


def _environment(changes: Mapping[str, str | None]) -> dict[str, str]:
    merged: dict[str, str | None] = {**os.environ, **changes}
    return {name: value for name, value in merged.items() if value is not None}


def failure_reason(log: str) -> str:
    """The one line of a server's output that says why it stopped: its last error message.

    The server ends on a plain "tierank: ..." line, a JSON log record, or a traceback; of a
    traceback only the message of its last exception is kept (class paths mean nothing here).
    """
    for raw in reversed(log.splitlines()):
        line = raw.lstrip(_FRAME_NOISE).rstrip()
        if not line or set(line) <= set("+-0123456789 "):
            continue
        if line.startswith("{"):
            reason = _log_record_reason(line)
            if reason:
                return reason
            continue
        return _EXCEPTION_PREFIX.sub("", line) or line
    return "no output (see the server's log)"


def _log_record_reason(line: str) -> str:
    try:
        record = json.loads(line)
    except json.JSONDecodeError:
        return line
    if not isinstance(record, dict) or str(record.get("level", "")).lower() not in _FAILURE_LEVELS:
        return ""
    return " ".join(str(record[k]) for k in ("event", "error") if record.get(k))
