"""The rule for tests that need ../shared/data: skipped where it is missing, failed in CI."""

from __future__ import annotations

from pathlib import Path

import pytest
from shared_data import SHARED_DATA, require_shared_data

CI_VARIABLES = ("CI", "TIERANK_REQUIRE_SHARED_DATA")


@pytest.fixture
def outside_ci(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in CI_VARIABLES:
        monkeypatch.delenv(name, raising=False)


@pytest.mark.usefixtures("outside_ci")
def test_missing_data_skips_outside_ci(tmp_path: Path) -> None:
    with pytest.raises(pytest.skip.Exception, match="shared data not found at"):
        require_shared_data(tmp_path / "nowhere")


@pytest.mark.usefixtures("outside_ci")
@pytest.mark.parametrize(("name", "value"), [("CI", "true"), ("TIERANK_REQUIRE_SHARED_DATA", "1")])
def test_missing_data_fails_in_ci(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str, value: str
) -> None:
    monkeypatch.setenv(name, value)
    with pytest.raises(pytest.fail.Exception, match="CI requires it"):
        require_shared_data(tmp_path / "nowhere")


def test_present_data_is_returned(shared_data: Path) -> None:
    assert shared_data == SHARED_DATA == require_shared_data()
    assert (shared_data / "trec-dl" / "qrels.dl19-passage.txt").is_file()
