"""Write the quality–cost curve: CURVE.md, a plot per scenario and curve-summary.json."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from tierank.bench.ranking.curve import (
    BASELINES,
    REFERENCE,
    SLIDING_WINDOW,
    BudgetPoint,
    CurveRun,
)
from tierank.bench.ranking.report import Summary, fmt, verdict
from tierank.bench.ranking.stats import Interval, paired_difference, summarize

# The targets of issue 17: critical path at most this, and unbudgeted tierank ahead of the
# reference by at least this much nDCG@10.
MAX_CRITICAL_PATH = 4
UNBUDGETED_LEAD = 0.02


@dataclass(frozen=True)
class CurveRow:
    label: str
    method: str
    # The budgeted rows only: budget / the reference's mean spend, the budget, and whose spend
    # set it (BudgetPoint.set_by).
    multiple: float | None
    budget_tokens: int | None
    set_by: str | None
    ndcg10: Interval
    input_tokens: Interval
    calls: Interval
    critical_path: Interval
    # The largest spend of one query and seed: what a per-query budget bounds.
    max_input_tokens: int
    # Paired differences of nDCG@10 (None for the method itself).
    minus_reference: Interval | None
    minus_sliding_window: Interval | None


def _point_label(point: BudgetPoint) -> str:
    if point.set_by == SLIDING_WINDOW:
        return f"tierank, budget = {SLIDING_WINDOW}'s spend"
    return f"tierank, budget {point.multiple:.2f}×"


def curve_rows(run: CurveRun, summary: Summary, scenario: str) -> list[CurveRow]:
    """The budgeted rows in increasing budget, then the baselines."""
    labelled: list[tuple[str, str, BudgetPoint | None]] = [
        (_point_label(point), point.method, point)
        for point in run.points
        if point.scenario == scenario
    ]
    labelled += [
        ("tierank, no budget" if method == "tierank" else method, method, None)
        for method in BASELINES
    ]
    rows = []
    for label, method, point in labelled:
        figures = summary[(scenario, method)]
        spent = [
            r.input_tokens for r in run.records if (r.scenario, r.method) == (scenario, method)
        ]

        def minus(baseline: str, method: str = method) -> Interval | None:
            if method == baseline:
                return None
            return paired_difference(run.records, scenario, method, baseline)

        rows.append(
            CurveRow(
                label=label,
                method=method,
                multiple=point.multiple if point else None,
                budget_tokens=point.tokens if point else None,
                set_by=point.set_by if point else None,
                ndcg10=figures["ndcg10"],
                input_tokens=figures["input_tokens"],
                calls=figures["calls"],
                critical_path=figures["critical_path"],
                max_input_tokens=max(spent),
                minus_reference=minus(REFERENCE),
                minus_sliding_window=minus(SLIDING_WINDOW),
            )
        )
    return rows


def _cell(interval: Interval | None) -> str:
    return "—" if interval is None else fmt(interval, 4)


def table(rows: Sequence[CurveRow]) -> str:
    lines = [
        f"| method | × {REFERENCE} spend | budget (tokens) | nDCG@10 | input tokens spent "
        f"(max) | calls | critical path | − {REFERENCE} (paired) | − {SLIDING_WINDOW} (paired) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        multiple = "—" if row.multiple is None else f"{row.multiple:.2f}"
        budget = "—" if row.budget_tokens is None else str(row.budget_tokens)
        lines.append(
            f"| {row.label} | {multiple} | {budget} | {fmt(row.ndcg10, 4)} "
            f"| {row.input_tokens.mean:.0f} ({row.max_input_tokens}) | {row.calls.mean:.1f} "
            f"| {row.critical_path.mean:.2f} | {_cell(row.minus_reference)} "
            f"| {_cell(row.minus_sliding_window)} |"
        )
    return "\n".join(lines)


def targets(rows_by_scenario: dict[str, list[CurveRow]]) -> list[str]:
    """Issue 17's targets as measured, for the points that were run."""
    lines = []
    for scenario, rows in rows_by_scenario.items():
        for row in rows:
            if row.set_by == REFERENCE and row.multiple == 1.0:
                diff, path = row.minus_reference, row.critical_path.mean
                assert diff is not None
                lines.append(
                    f"- {scenario}, budget 1.00× {REFERENCE}'s spend ({row.budget_tokens} "
                    f"tokens, spent {row.input_tokens.mean:.0f}): tierank − {REFERENCE} = "
                    f"{fmt(diff, 4)}, critical path {path:.2f}: "
                    f"{verdict(diff.high >= 0 and path <= MAX_CRITICAL_PATH)} "
                    f"(target: interval reaches 0 or above, critical path ≤ {MAX_CRITICAL_PATH})"
                )
            if row.set_by == SLIDING_WINDOW:
                diff = row.minus_sliding_window
                assert diff is not None
                lines.append(
                    f"- {scenario}, budget = {SLIDING_WINDOW}'s spend ({row.budget_tokens} "
                    f"tokens, spent {row.input_tokens.mean:.0f}): tierank − {SLIDING_WINDOW} = "
                    f"{fmt(diff, 4)}: {verdict(diff.high >= 0)} "
                    "(target: interval reaches 0 or above)"
                )
        unbudgeted = next(row for row in rows if row.method == "tierank")
        diff, path = unbudgeted.minus_reference, unbudgeted.critical_path.mean
        assert diff is not None
        lines.append(
            f"- {scenario}, tierank unbudgeted (spent {unbudgeted.input_tokens.mean:.0f}): "
            f"tierank − {REFERENCE} = {fmt(diff, 4)}, critical path {path:.2f}: "
            f"{verdict(diff.mean >= UNBUDGETED_LEAD and path <= MAX_CRITICAL_PATH)} "
            f"(target: mean difference ≥ {UNBUDGETED_LEAD}, critical path ≤ {MAX_CRITICAL_PATH})"
        )
    return lines


def curve_plot(rows: Sequence[CurveRow], scenario: str, reference_spend: float, path: Path) -> None:
    budgeted = sorted((row for row in rows if row.budget_tokens), key=lambda r: r.input_tokens.mean)
    fig, ax = plt.subplots(figsize=(8, 5))
    x = [row.input_tokens.mean for row in budgeted]
    y = [row.ndcg10.mean for row in budgeted]
    ax.errorbar(
        x,
        y,
        yerr=[
            [r.ndcg10.mean - r.ndcg10.low for r in budgeted],
            [r.ndcg10.high - r.ndcg10.mean for r in budgeted],
        ],
        fmt="-o",
        capsize=3,
        color="tab:blue",
        label="tierank with a token budget",
    )
    for row in budgeted:
        name = "= SW" if row.set_by == SLIDING_WINDOW else f"{row.multiple:.2f}×"
        ax.annotate(
            name,
            (row.input_tokens.mean, row.ndcg10.mean),
            textcoords="offset points",
            xytext=(4, -12),
            fontsize=7,
            color="tab:blue",
        )
    for index, row in enumerate(r for r in rows if not r.budget_tokens):
        ax.errorbar(
            row.input_tokens.mean,
            row.ndcg10.mean,
            yerr=[[row.ndcg10.mean - row.ndcg10.low], [row.ndcg10.high - row.ndcg10.mean]],
            fmt="s" if row.method == "tierank" else "o",
            capsize=3,
            color="tab:red" if row.method == "tierank" else "tab:grey",
        )
        ax.annotate(
            row.label,
            (row.input_tokens.mean, row.ndcg10.mean),
            textcoords="offset points",
            xytext=(5, 6 - 12 * (index % 3)),
            fontsize=8,
        )
    ax.axvline(reference_spend, linestyle=":", color="black", label=f"{REFERENCE} mean spend")
    ax.set_xlabel("input tokens per query (mean)")
    ax.set_ylabel("nDCG@10 (DL19 human qrels)")
    ax.set_title(f"{scenario} judge: nDCG@10 vs input tokens")
    ax.grid(True, alpha=0.3)
    ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def write_curve(run: CurveRun, command: str, settings: str, out: Path) -> Path:
    """CURVE.md in ``out``, curve-<scenario>.png and curve-summary.json in ``out/results``."""
    figures_dir = out / "results"
    figures_dir.mkdir(parents=True, exist_ok=True)
    summary = summarize(run.records)
    rows_by_scenario = {scenario: curve_rows(run, summary, scenario) for scenario in run.spend}
    parts = [
        "# Ranking benchmark: a quality–cost curve",
        "",
        f"Command: `{command}`",
        "",
        settings,
        "",
        f"tierank runs with a per-query budget of input tokens (each query's job gets the same "
        f"budget): multiples of {REFERENCE}'s mean input tokens per query (BlitzRank as its "
        f"published code behaves), measured in this run and scenario, and the {SLIDING_WINDOW}'s "
        "mean spend. Figures are means per query over the queries (each first averaged over the "
        "seeds) with 95% percentile-bootstrap intervals over queries; differences are paired "
        "(per query, then bootstrapped). Input tokens spent: mean, and in brackets the largest "
        "spend of one query and seed. Budgeted runs draw unbudgeted tierank's noise stream. "
        "RESULTS.md explains the judges and the cost model.",
    ]
    for scenario, rows in rows_by_scenario.items():
        spend = run.spend[scenario]
        parts += [
            "",
            f"## {scenario} judge",
            "",
            f"{REFERENCE} mean spend {spend[REFERENCE]:.0f} input tokens per query; "
            f"{SLIDING_WINDOW} {spend[SLIDING_WINDOW]:.0f}.",
            "",
            table(rows),
            "",
            f"![nDCG@10 vs input tokens](results/curve-{scenario}.png)",
        ]
        curve_plot(rows, scenario, spend[REFERENCE], figures_dir / f"curve-{scenario}.png")
    target_lines = targets(rows_by_scenario)
    parts += ["", "## Targets, as measured", "", *target_lines]
    curve_md = out / "CURVE.md"
    curve_md.write_text("\n".join(parts) + "\n", encoding="utf-8")
    (figures_dir / "curve-summary.json").write_text(
        json.dumps(
            {
                "command": command,
                "settings": settings,
                "scenarios": {
                    scenario: {
                        "spend": run.spend[scenario],
                        "rows": [asdict(row) for row in rows],
                    }
                    for scenario, rows in rows_by_scenario.items()
                },
                "targets": target_lines,
            },
            indent=1,
        ),
        encoding="utf-8",
    )
    return curve_md
