"""The generated stubs in gen/ must be exactly what proto/ produces."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def test_generated_stubs_are_fresh():
    result = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "gen_proto.py"), "--check"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr
