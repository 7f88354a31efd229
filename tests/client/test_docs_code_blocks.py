"""Every fenced python, sh and bash block of README.md and docs/*.md runs as written.

Python blocks run against a real server on loopback: the documented default address
127.0.0.1:50051 is replaced by that server's. Shell blocks run with bash from the repository
root (`set -eo pipefail` first, so any failing command fails the block), with the project's
`tierank` on the PATH, a scratch $XDG_DATA_HOME and a patient $TIERANK_CONNECT_TIMEOUT;
background servers a block starts are killed with its process group.

So that blocks can run side by side (pytest-xdist workers, or two people's suites on one
machine), a block's own fixed places are swapped for its own: a port a block serves on
(`--listen 127.0.0.1:50077`) becomes a free one, wherever the block names it, and /tmp/ becomes
a scratch folder of the test's, which is also its $TMPDIR (for `mktemp`).

A block that cannot run here (it needs API keys, runs the whole test suite, or is a synopsis
with placeholders) opts out with this line right above its opening fence, reason required:

    <!-- docs-test: skip (needs API keys) -->
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import socket
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from cli_process import REPO_ROOT, cli_environment

pytestmark = pytest.mark.long_module

DOCUMENTS = [REPO_ROOT / "README.md", *sorted((REPO_ROOT / "docs").glob("*.md"))]
RUN_LANGUAGES = {"python": "python", "sh": "shell", "bash": "shell"}
DEFAULT_ADDRESS = "127.0.0.1:50051"
SERVED_PORT = re.compile(r"--listen[ =]127\.0\.0\.1:(?P<port>[1-9]\d*)\b")
SHARED_TMP = re.compile(r"(?<![\w./-])/tmp/")
SKIP_MARKER = re.compile(r"^<!--\s*docs-test:\s*skip\s*\((?P<reason>[^)]+)\)\s*-->$")
FENCE = re.compile(r"^(?P<fence>```+|~~~+)\s*(?P<language>[\w+-]*)")
BLOCK_TIMEOUT_SECONDS = 180


@dataclass(frozen=True)
class CodeBlock:
    path: Path
    line: int
    language: str
    code: str
    skip_reason: str | None

    @property
    def id(self) -> str:
        return f"{self.path.relative_to(REPO_ROOT)}:{self.line}"


def code_blocks(path: Path) -> list[CodeBlock]:
    """Fenced blocks in the languages we run, with the skip marker of the line above."""
    lines = path.read_text(encoding="utf-8").splitlines()
    blocks = []
    index = 0
    while index < len(lines):
        opening = FENCE.match(lines[index])
        if not opening:
            index += 1
            continue
        fence, language = opening["fence"], opening["language"].lower()
        end = next(
            (i for i in range(index + 1, len(lines)) if lines[i].startswith(fence)), len(lines)
        )
        if language in RUN_LANGUAGES:
            marker = SKIP_MARKER.match(lines[index - 1].strip()) if index else None
            blocks.append(
                CodeBlock(
                    path=path,
                    line=index + 1,
                    language=RUN_LANGUAGES[language],
                    code="\n".join(lines[index + 1 : end]) + "\n",
                    skip_reason=marker["reason"] if marker else None,
                )
            )
        index = end + 1
    return blocks


BLOCKS = [block for document in DOCUMENTS for block in code_blocks(document)]


def test_the_documents_have_blocks_to_run() -> None:
    # Guards the extraction itself: a broken fence pattern would silently run nothing.
    readme = [b for b in BLOCKS if b.path.name == "README.md"]
    assert {b.language for b in readme} == {"python", "shell"}
    assert any(b.skip_reason is None for b in readme)


def free_port() -> int:
    """A loopback port nothing listens on (free a moment ago)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def own_places(code: str, server: str, scratch: Path) -> str:
    """`code` with the ports it serves on made free ones, the default address made `server`'s
    (a block that serves on the default address keeps a server of its own), and /tmp/ made
    `scratch`."""
    for port in dict.fromkeys(m["port"] for m in SERVED_PORT.finditer(code)):
        code = re.sub(rf"127\.0\.0\.1:{port}\b", f"127.0.0.1:{free_port()}", code)
    code = code.replace(DEFAULT_ADDRESS, server)
    return SHARED_TMP.sub(f"{scratch}/", code)


def test_own_places_swaps_served_ports_and_tmp_only(tmp_path: Path) -> None:
    code = (
        "tierank serve --listen 127.0.0.1:50077 --db /tmp/demo.db &\n"
        "export TIERANK_SERVER=127.0.0.1:50077\n"
        "tierank jobs --server 127.0.0.1:50051 > /tmp/out; cat /var/tmp/x\n"
        "psql postgresql://postgres@127.0.0.1:5432/test; tierank serve --listen 127.0.0.1:0\n"
    )
    swapped = own_places(code, "127.0.0.1:6001", tmp_path)
    port = re.search(r"--listen 127\.0\.0\.1:(\d+) ", swapped)
    assert port is not None and port[1] not in ("50077", "0")
    assert swapped == (
        f"tierank serve --listen 127.0.0.1:{port[1]} --db {tmp_path}/demo.db &\n"
        f"export TIERANK_SERVER=127.0.0.1:{port[1]}\n"
        f"tierank jobs --server 127.0.0.1:6001 > {tmp_path}/out; cat /var/tmp/x\n"
        "psql postgresql://postgres@127.0.0.1:5432/test; tierank serve --listen 127.0.0.1:0\n"
    )


@pytest.mark.parametrize("block", BLOCKS, ids=[b.id for b in BLOCKS])
def test_code_block_runs(block: CodeBlock, tierank_server: str, tmp_path: Path) -> None:
    if block.skip_reason is not None:
        pytest.skip(block.skip_reason)
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    code = own_places(block.code, tierank_server, scratch)
    if block.language == "python":
        command = [sys.executable, "-c", code]
    else:
        command = ["bash", "-c", "set -eo pipefail\n" + code]
    environment = cli_environment()
    environment["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{environment['PATH']}"
    environment["XDG_DATA_HOME"] = str(tmp_path / "data")
    environment["TMPDIR"] = str(scratch)
    # A block's `tierank serve &` can take a while to start on a busy machine.
    environment["TIERANK_CONNECT_TIMEOUT"] = "60"
    # Output to a file, not a pipe: a background server would hold a pipe open after the end.
    log = tmp_path / "output.log"
    with open(log, "w") as output:
        process = subprocess.Popen(
            command,
            cwd=REPO_ROOT,
            env=environment,
            stdin=subprocess.DEVNULL,
            stdout=output,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            process.wait(timeout=BLOCK_TIMEOUT_SECONDS)
        finally:
            # Whatever the block left running in the background (`tierank serve &`) goes too.
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    tail = log.read_text(errors="replace")[-3000:]
    assert process.returncode == 0, f"{block.id} exited {process.returncode}:\n{tail}"
