"""The quality–cost curve: tierank at token budgets set from BlitzRank-k10's spend in the same run,
beside the baselines, through the command line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tierank.bench.ranking.__main__ import main
from tierank.bench.ranking.curve import BASELINES, REFERENCE, SLIDING_WINDOW
from tierank.bench.ranking.data import load_queries
from tierank.bench.ranking.methods import METHODS, budget_method_name
from tierank.bench.ranking.prompt import estimate_input_tokens
from tierank.scheduler.types import TournamentConfig

QUERIES = 2
MULTIPLES = (0.8, 1.0)

pytestmark = pytest.mark.usefixtures("shared_data")


def _curve(out: Path, first_seed: int) -> dict:
    main(
        [
            "curve",
            "--queries",
            str(QUERIES),
            "--seeds",
            "1",
            "--first-seed",
            str(first_seed),
            "--multiples",
            *map(str, MULTIPLES),
            "--workers",
            "1",
            "--out",
            str(out),
        ]
    )
    return json.loads((out / "results" / "curve-summary.json").read_text())


@pytest.fixture(scope="module")
def curves(tmp_path_factory) -> tuple[Path, dict, dict]:
    out = tmp_path_factory.mktemp("curve")
    first = _curve(out, first_seed=0)
    unseen = _curve(tmp_path_factory.mktemp("curve-unseen"), first_seed=100)
    return out, first, unseen


def _largest_call(queries) -> int:
    """Input tokens of the costliest call a tournament can make: its longest passages."""
    k = TournamentConfig().batch_size
    return max(
        estimate_input_tokens(
            query.text, sorted((query.passages[pid] for pid in query.candidates), key=len)[-k:]
        )
        for query in queries
    )


def test_budgeted_tierank_is_resolved_by_name():
    method = METHODS[budget_method_name(5000)]
    assert method.name == "tierank-budget-5000"
    assert method.noise_of == "tierank"
    assert "tierank-budget-5000" in METHODS
    assert "tierank-budget-x" not in METHODS
    with pytest.raises(KeyError):
        METHODS["tierank-budget-0"]


def test_curve_writes_a_row_per_budget_and_baseline(curves):
    out, summary, _ = curves
    assert set(summary["scenarios"]) == {"strong", "weak"}
    for scenario, data in summary["scenarios"].items():
        assert (out / "results" / f"curve-{scenario}.png").stat().st_size > 1000
        rows = data["rows"]
        reference = data["spend"][REFERENCE]
        budgeted = [row for row in rows if row["set_by"] == REFERENCE]
        assert sorted(row["multiple"] for row in budgeted) == sorted(MULTIPLES)
        for row in budgeted:
            assert row["budget_tokens"] == round(row["multiple"] * reference)
        (sliding,) = [row for row in rows if row["set_by"] == SLIDING_WINDOW]
        assert sliding["budget_tokens"] == round(data["spend"][SLIDING_WINDOW])
        assert sliding["minus_sliding_window"] is not None
        assert {row["method"] for row in rows if row["set_by"] is None} == set(BASELINES)
        for row in rows:
            assert 0 <= row["ndcg10"]["low"] <= row["ndcg10"]["mean"] <= row["ndcg10"]["high"] <= 1
            assert (row["minus_reference"] is None) == (row["method"] == REFERENCE)
    text = (out / "CURVE.md").read_text()
    for multiple in MULTIPLES:
        assert text.count(f"| tierank, budget {multiple:.2f}× |") == 2
    targets = text.split("## Targets, as measured")[1]
    assert targets.count("\n- ") == 6
    assert all(line.endswith(")") for line in targets.strip().splitlines())


def test_budgeted_runs_spend_at_most_one_call_over_their_budget(curves):
    _, summary, _ = curves
    slack = _largest_call(load_queries()[:QUERIES])
    for data in summary["scenarios"].values():
        for row in data["rows"]:
            if row["budget_tokens"] is not None:
                assert row["calls"]["mean"] > 0
                assert row["max_input_tokens"] <= row["budget_tokens"] + slack


def test_first_seed_changes_the_noise(curves):
    _, first, unseen = curves
    assert "seeds 0–0" in first["settings"]
    assert "seeds 100–100" in unseen["settings"]

    def figures(summary: dict) -> list[tuple[float, float]]:
        return [
            (row["ndcg10"]["mean"], row["input_tokens"]["mean"])
            for data in summary["scenarios"].values()
            for row in data["rows"]
            if row["method"] != "bm25"
        ]

    assert figures(first) != figures(unseen)
