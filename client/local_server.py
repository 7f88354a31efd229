"""Run a tierank server as a child process on loopback: the CLI's embedded mode, and tests.

Only the server's command line is used (`python -m tierank.server ...`), never its Python
package, so the client stays independent of the server's code.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

_POLL_SECONDS = 0.02


class LocalServerError(RuntimeError):
    """The server process exited or stayed silent instead of becoming ready."""


class LocalServer:
    """`with LocalServer(db=path) as server:` gives a serving `server.address` ("host:port").

    The server writes its bound address to a ready file once it serves; its stderr goes to a
    log file so that a failed start can be explained. Stopping sends SIGTERM (graceful), then
    SIGKILL if it does not exit in time.
    """

    def __init__(
        self,
        *,
        db: Path | str | None = None,
        listen: str = "127.0.0.1:0",
        extra_args: tuple[str, ...] = (),
        env: dict[str, str] | None = None,
        startup_timeout: float = 30.0,
    ) -> None:
        self.db = db
        self.listen = listen
        self.extra_args = extra_args
        self.env = env
        self.startup_timeout = startup_timeout
        self.address = ""
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
        command = [sys.executable, "-m", "tierank.server", "--listen", self.listen]
        command += ["--ready-file", str(ready_file), *self.extra_args]
        if self.db is not None:
            command += ["--db", str(self.db)]
        with open(self.log_path, "wb") as log:
            self._process = subprocess.Popen(
                command,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env={**os.environ, **(self.env or {})},
            )
        try:
            self.address = self._wait_for_address(ready_file)
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

    def _wait_for_address(self, ready_file: Path) -> str:
        assert self._process is not None
        give_up_at = time.monotonic() + self.startup_timeout
        previous = ""
        while time.monotonic() < give_up_at:
            if self._process.poll() is not None:
                raise LocalServerError(
                    f"tierank server exited with code {self._process.returncode} before it was"
                    f" ready:\n{self.log_tail()}"
                )
            content = ready_file.read_text().strip() if ready_file.exists() else ""
            # Two equal reads in a row: the server has finished writing the file.
            if content and content == previous:
                return content
            previous = content
            time.sleep(_POLL_SECONDS)
        raise LocalServerError(
            f"tierank server not ready after {self.startup_timeout:.0f}s:\n{self.log_tail()}"
        )
