"""The shared data the tests read in place (TREC DL, trec_eval's references): where it is, and
the one rule for a test that needs it where it is missing.

It lives beside the checkout, `../shared/data`, or beside the folder of worktrees the checkout
is in. Where it is missing, a test that needs it is skipped on a developer's machine and fails
in CI, where a skip would turn a missing folder into a green run that tested nothing. CI is
`CI=true` (what CI services set) or `TIERANK_REQUIRE_SHARED_DATA=1` (what `.ci/run` sets, as it
sets TIERANK_REQUIRE_POSTGRES=1).

Tests ask for it through the `shared_data` fixture (tests/conftest.py), or mark a module or test
`pytest.mark.usefixtures("shared_data")` when they use the paths below directly.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
SHARED_DATA = next(
    (
        folder / "shared" / "data"
        for folder in REPO_ROOT.parents
        if (folder / "shared" / "data").is_dir()
    ),
    REPO_ROOT.parent / "shared" / "data",
)
TREC_DL = SHARED_DATA / "trec-dl"


def required() -> bool:
    return (
        os.environ.get("CI", "").lower() == "true"
        or os.environ.get("TIERANK_REQUIRE_SHARED_DATA") == "1"
    )


def require_shared_data(folder: Path = SHARED_DATA) -> Path:
    """`folder`; where it is missing, the calling test is skipped, or failed in CI."""
    if folder.is_dir():
        return folder
    missing = f"shared data not found at {folder}"
    if required():
        pytest.fail(
            f"{missing}; CI requires it (CI=true or TIERANK_REQUIRE_SHARED_DATA=1)", pytrace=False
        )
    pytest.skip(missing)
