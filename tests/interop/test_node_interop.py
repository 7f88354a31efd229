"""Runs the Node.js interop tests (tests/interop/node: ranking, the qualification API, and a whole
study) against a real tierank server.

Needs node >= 18 and `npm ci --prefix tests/interop/node`; fails, rather than skips, without
them, so a CI that forgot to install them cannot pass silently.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from certs import issue, make_ca

from tierank.client import LocalServer

NODE_DIR = Path(__file__).resolve().parent / "node"
# study.test.mjs runs a 300-query study (about 4 s on 2 cores); $TIERANK_STUDY_QUERIES=10000
# runs the issue's 10,000 (minutes).
NODE_TESTS = ("rank", "qualify", "study")


def member_key(db: Path, tenant: str) -> str:
    """A key made on the database before the server starts, as an operator makes one (the
    tenant first, then its key)."""
    made = {}
    for method in ("SetTenant", "CreateApiKey"):
        done = subprocess.run(
            [sys.executable, "-m", "tierank.server.admin_tool", method, "--db", str(db)],
            input=json.dumps({"tenant": tenant}),
            capture_output=True,
            text=True,
            check=True,
            timeout=60,
        )
        made = json.loads(done.stdout)
    return made["secret"]


@pytest.fixture
def server_environment(tmp_path: Path) -> Iterator[dict[str, str]]:
    """A server with --auth keys and TLS, and the keys of two tenants."""
    db = tmp_path / "tierank.db"
    keys = {
        "TIERANK_API_KEY": member_key(db, "node-a"),
        "TIERANK_OTHER_API_KEY": member_key(db, "node-b"),
    }
    ca = make_ca(tmp_path, "interop CA")
    server_cert = issue(ca, tmp_path, "localhost", server=True)
    tls = ("--tls-cert", str(server_cert.cert), "--tls-key", str(server_cert.key))
    with LocalServer(db=db, extra_args=("--auth", "keys", *tls)) as server:
        yield {"TIERANK_ADDRESS": server.address, "TIERANK_TLS_CA": str(server_cert.ca), **keys}


def test_node_client_interoperates(server_environment: dict[str, str]) -> None:
    node = shutil.which("node")
    if node is None:
        pytest.fail("node is not on PATH; install Node.js >= 18 to run the interop test")
    if not (NODE_DIR / "node_modules" / "@grpc" / "grpc-js").is_dir():
        pytest.fail(f"{NODE_DIR}/node_modules is missing; run: npm ci --prefix tests/interop/node")
    result = subprocess.run(
        [node, "--test", *(str(NODE_DIR / f"{name}.test.mjs") for name in NODE_TESTS)],
        capture_output=True,
        text=True,
        timeout=240,
        env={**os.environ, **server_environment},
    )
    assert result.returncode == 0, f"node interop test failed:\n{result.stdout}\n{result.stderr}"
    assert "# pass 15" in result.stdout
