"""Runs the Node.js interop test (tests/interop/node) against a real tierank server.

Needs node >= 18 and `npm ci --prefix tests/interop/node`; fails, rather than skips, without
them, so a CI that forgot to install them cannot pass silently.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tierank.client import LocalServer

NODE_DIR = Path(__file__).resolve().parent / "node"


@pytest.fixture
def server_address(tmp_path: Path) -> Iterator[str]:
    with LocalServer(db=tmp_path / "tierank.db") as server:
        yield server.address


def test_node_client_interoperates(server_address: str) -> None:
    node = shutil.which("node")
    if node is None:
        pytest.fail("node is not on PATH; install Node.js >= 18 to run the interop test")
    if not (NODE_DIR / "node_modules" / "@grpc" / "grpc-js").is_dir():
        pytest.fail(f"{NODE_DIR}/node_modules is missing; run: npm ci --prefix tests/interop/node")
    result = subprocess.run(
        [node, "--test", str(NODE_DIR / "rank.test.mjs")],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "TIERANK_ADDRESS": server_address},
    )
    assert result.returncode == 0, f"node interop test failed:\n{result.stdout}\n{result.stderr}"
    assert "# pass 4" in result.stdout
