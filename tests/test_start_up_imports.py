"""What a process imports to start. Servers, admin tools and `tierank` commands are started
often (a command line starts one or two; a run of this suite, hundreds), so the heavy libraries
that few of them need are imported where needed, never at start-up: numpy (about a tenth of a
second: comparisons and simulated judges), matplotlib (a third of a second, which igraph imports
whenever it is installed) and, in the client, cryptography (for PEM files only)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

SERVER_UNWANTED = ("numpy", "matplotlib")


@pytest.mark.parametrize(
    ("entry_point", "unwanted"),
    [
        ("tierank.server.__main__", SERVER_UNWANTED),
        ("tierank.server.admin_tool", SERVER_UNWANTED),
        ("tierank.client.cli", (*SERVER_UNWANTED, "cryptography")),
        # A provider's judge loads its own SDK only: google-genai costs a third of a second.
        ("tierank.server.judges.openai_judges", ("google.genai",)),
        ("tierank.server.judges.anthropic_judge", ("google.genai",)),
        ("tierank.server.judges.batches.openai_batches", ("google.genai",)),
    ],
)
def test_starting_imports_no_heavy_library_it_seldom_needs(
    entry_point: str, unwanted: tuple[str, ...]
) -> None:
    code = (
        f"import json, sys, {entry_point}\n"
        f"print(json.dumps([name for name in {list(unwanted)!r} if name in sys.modules]))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert json.loads(done.stdout) == []
