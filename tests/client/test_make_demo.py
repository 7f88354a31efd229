"""`make demo` depends on nothing outside the clone (issue 22, item 26): a refused
qualification of its judge in the user's default database does not stop it."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from cli_process import REPO_ROOT, cli_environment, tierank
from shared_data import TREC_DL

DL = TREC_DL
EXIT_NOT_QUALIFIED = 5


@pytest.mark.skipif(shutil.which("make") is None, reason="make not installed")
@pytest.mark.skipif(
    not (REPO_ROOT / ".venv" / "bin" / "tierank").exists(), reason="no .venv in the checkout"
)
@pytest.mark.usefixtures("shared_data")
def test_make_demo_ignores_a_refused_qualification_in_the_default_database(
    tmp_path: Path,
) -> None:
    # The synopsis of docs/judges.md on the default database: lexical is found wanting there.
    home = {"XDG_DATA_HOME": str(tmp_path / "data")}
    qualified = tierank(
        "qualify", "--judge", "lexical", "--qrels", str(DL / "qrels.dl19-passage.txt"),
        "--topics", str(DL / "topics.dl19-passage.txt"),
        "--passages", str(DL / "passages" / "dl19-rankllm-union-passages.jsonl"),
        "--run", str(DL / "runs" / "run.rankllm.BM25.dl19.top100.trec"), "--queries", "10",
        env=home,
    )  # fmt: skip
    assert qualified.returncode == EXIT_NOT_QUALIFIED, qualified.stderr

    demo = subprocess.run(
        ["make", "--no-print-directory", "demo", f"DEMO_DB={tmp_path / 'demo.db'}"],
        cwd=REPO_ROOT, env=cli_environment(home), capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert demo.returncode == 0, demo.stderr
    assert "completed (settled)" in demo.stderr
