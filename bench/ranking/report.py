"""Write the benchmark's outputs: a markdown table with the targets, Pareto plots, summary.json."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from tierank.bench.ranking.experiment import Record
from tierank.bench.ranking.judges import PANELS
from tierank.bench.ranking.stats import (
    Interval,
    mean_calls_by_round,
    paired_difference,
    summarize,
)

Summary = dict[tuple[str, str], dict[str, Interval]]

# (method, the same without balanced positions): what balancing adds, per scenario.
BALANCING_PAIRS = (
    ("tierank", "tierank-shuffle-only"),
    ("tierank-3-samples", "tierank-3-samples-shuffle-only"),
    ("tierank-all", "tierank-all-shuffle-only"),
    ("tierank-adaptive", "tierank-adaptive-shuffle-only"),
)
# (method with the judges weighted by their qualification, the same with equal weights).
WEIGHTING_PAIRS = (
    ("tierank-all-weighted", "tierank-all"),
    ("tierank-adaptive-weighted", "tierank-adaptive"),
    ("tierank-all-usable", "tierank-all"),
    ("tierank-adaptive-usable", "tierank-adaptive"),
)


CHOICES = Path(__file__).resolve().parent / "CHOICES.md"


def fmt(interval: Interval, digits: int) -> str:
    return f"{interval.mean:.{digits}f} [{interval.low:.{digits}f}, {interval.high:.{digits}f}]"


def table(summary: Summary, scenario: str, ideal: float) -> str:
    rows = [
        "| method | nDCG@10 | judge calls | failed | input tokens | critical path | sim. wall s |",
        "|---|---|---|---|---|---|---|",
    ]
    for (s, method), figures in summary.items():
        if s != scenario:
            continue
        rows.append(
            f"| {method} | {fmt(figures['ndcg10'], 4)} | {fmt(figures['calls'], 1)} "
            f"| {figures['failed_calls'].mean:.2f} | {fmt(figures['input_tokens'], 0)} "
            f"| {fmt(figures['critical_path'], 1)} | {fmt(figures['wall_seconds'], 1)} |"
        )
    rows.append(f"| ideal reordering of the candidates | {ideal:.4f} | | | | | |")
    return "\n".join(rows)


def verdict(ok: bool) -> str:
    return "met" if ok else "**missed**"


def targets(records: Sequence[Record], summary: Summary) -> list[str]:
    """The project's targets, each as measured; lines only for the methods that were run."""
    lines = []
    have = set(summary)

    def mean(scenario: str, method: str, figure: str) -> float:
        return summary[(scenario, method)][figure].mean

    def ratio(scenario: str, method: str, reference: str, figure: str) -> float:
        return mean(scenario, method, figure) / mean(scenario, reference, figure)

    if {("strong", "tierank"), ("strong", "blitzrank-k10")} <= have:
        diff = paired_difference(records, "strong", "tierank", "blitzrank-k10")
        tokens = ratio("strong", "tierank", "blitzrank-k10", "input_tokens")
        path = mean("strong", "tierank", "critical_path")
        lines += [
            f"- strong: nDCG@10 tierank − BlitzRank-k10 (published) = {fmt(diff, 4)} (paired): "
            f"{verdict(diff.high >= 0)} (target: not below, within the 95% interval)",
            f"- strong: input tokens tierank / BlitzRank-k10 (published) = {tokens:.2f}: "
            f"{verdict(tokens <= 0.9)} (target ≤ 0.90)",
            f"- strong: tierank critical path = {path:.2f}: {verdict(path <= 4)} (target ≤ 4)",
        ]
    if {("strong", "tierank"), ("strong", "blitzrank-all-pairs-k10")} <= have:
        diff = paired_difference(records, "strong", "tierank", "blitzrank-all-pairs-k10")
        tokens = ratio("strong", "tierank", "blitzrank-all-pairs-k10", "input_tokens")
        lines.append(
            f"- strong, for reference (not a target): nDCG@10 tierank − BlitzRank-k10 with all "
            f"pairs = {fmt(diff, 4)} (paired), at {tokens:.2f}× its input tokens"
        )
    if {("ensemble", "tierank-adaptive"), ("ensemble", "tierank-all")} <= have:
        diff = paired_difference(records, "ensemble", "tierank-adaptive", "tierank-all")
        calls = ratio("ensemble", "tierank-adaptive", "tierank-all", "calls")
        lines += [
            f"- ensemble: nDCG@10 adaptive − all = {fmt(diff, 4)} (paired): "
            f"{verdict(diff.high >= 0)} (target: reaches all's)",
            f"- ensemble: calls adaptive / all = {calls:.2f}: {verdict(calls <= 0.75)} "
            "(target ≤ 0.75)",
        ]
    if {("chance-ensemble", "tierank-all-weighted"), ("chance-ensemble", "tierank-all")} <= have:
        diff = paired_difference(records, "chance-ensemble", "tierank-all-weighted", "tierank-all")
        lines.append(
            f"- chance-ensemble (one judge of three at chance): nDCG@10 weighted by "
            f"qualification − equal weights (all) = {fmt(diff, 4)} (paired): "
            f"{verdict(diff.low > 0)} (target: above)"
        )
    if {("weak", "tierank"), ("weak", "sliding-window")} <= have:
        diff = paired_difference(records, "weak", "tierank", "sliding-window")
        lines.append(
            f"- weak: nDCG@10 tierank − sliding window = {fmt(diff, 4)} (paired): "
            f"{verdict(diff.high >= 0)} (target: not below)"
        )
    if {("weak", "tierank-3-samples"), ("weak", "sliding-window")} <= have:
        diff = paired_difference(records, "weak", "tierank-3-samples", "sliding-window")
        tokens = ratio("weak", "tierank-3-samples", "sliding-window", "input_tokens")
        lines.append(
            f"- weak, not the default: nDCG@10 tierank with the judge listed three times "
            f"(adaptive voting) − sliding window = {fmt(diff, 4)} (paired), "
            f"at {tokens:.2f}× its input tokens: {'above' if diff.low > 0 else 'not above'}"
        )
    return lines


def position_profile(records: Sequence[Record], scenario: str, method: str) -> str:
    """How often the panel's answers in `scenario` ranked the first-shown candidate first and
    repeated the shown order, in the calls `method` made."""
    chosen = [r for r in records if (r.scenario, r.method) == (scenario, method)]
    answers = sum(r.answers for r in chosen)
    if not answers:
        return ""
    first = sum(r.first_shown_first for r in chosen) / answers
    repeated = sum(r.repeated_shown for r in chosen) / answers
    return (
        f"- {scenario}: first-shown candidate ranked first in {first:.1%} of the answers, "
        f"the shown order repeated in {repeated:.1%} ({answers} answers to {method}'s calls)"
    )


def correction_lines(records: Sequence[Record], summary: Summary) -> list[str]:
    """Balanced positions against the shuffle alone, and weights from qualification against
    equal ones: paired differences of nDCG@10, for every scenario that ran both."""
    lines = []
    for scenario in dict.fromkeys(s for s, _ in summary):
        line = position_profile(records, scenario, "tierank")
        if line:
            lines.append(line)
    for title, pairs in (
        ("balanced positions − shuffle only", BALANCING_PAIRS),
        ("weighted by qualification − equal weights", WEIGHTING_PAIRS),
    ):
        for scenario in dict.fromkeys(s for s, _ in summary):
            for method, baseline in pairs:
                if not {(scenario, method), (scenario, baseline)} <= set(summary):
                    continue
                diff = paired_difference(records, scenario, method, baseline)
                ours, theirs = summary[(scenario, method)], summary[(scenario, baseline)]
                lines.append(
                    f"- {scenario} / {method}: {title}: nDCG@10 {fmt(diff, 4)} (paired); "
                    f"calls {ours['calls'].mean:.1f} vs {theirs['calls'].mean:.1f}, critical "
                    f"path {ours['critical_path'].mean:.2f} vs {theirs['critical_path'].mean:.2f}"
                )
                if pairs is WEIGHTING_PAIRS:
                    lines.append(_mean_weights(records, scenario, method))
    return lines


def _mean_weights(records: Sequence[Record], scenario: str, method: str) -> str:
    weights = [r.judge_weights for r in records if (r.scenario, r.method) == (scenario, method)]
    names = [profile.name for profile in PANELS[scenario]]
    means = [sum(w[i] for w in weights) / len(weights) for i in range(len(names))]
    shown = ", ".join(f"{name} {mean:.2f}" for name, mean in zip(names, means, strict=True))
    return f"  - weights (mean over queries): {shown}"


def rounds_profile(records: Sequence[Record], scenario: str, method: str, shown: int = 12) -> str:
    calls = mean_calls_by_round(records, scenario, method)
    if not calls:
        return ""
    head = ", ".join(f"{c:.2f}" for c in calls[:shown])
    more = f", … ({len(calls)} rounds at most)" if len(calls) > shown else ""
    return f"- {scenario} / {method}: mean calls in round 1, 2, …: {head}{more}"


def pareto_plot(summary: Summary, scenario: str, figure: str, label: str, path: Path) -> None:
    points = [(m, f) for (s, m), f in summary.items() if s == scenario and f["calls"].mean > 0]
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for index, (method, figures) in enumerate(points):
        x, y = figures[figure], figures["ndcg10"]
        ax.errorbar(
            x.mean,
            y.mean,
            xerr=[[x.mean - x.low], [x.high - x.mean]],
            yerr=[[y.mean - y.low], [y.high - y.mean]],
            fmt="o",
            capsize=3,
        )
        ax.annotate(
            method, (x.mean, y.mean), textcoords="offset points", xytext=(5, 5 - 14 * (index % 2))
        )
    # The frontier: methods that no other method beats on both cost and quality.
    front = sorted(
        (f[figure].mean, f["ndcg10"].mean)
        for _, f in points
        if not any(
            o[figure].mean <= f[figure].mean
            and o["ndcg10"].mean >= f["ndcg10"].mean
            and o is not f
            and (o[figure].mean, o["ndcg10"].mean) != (f[figure].mean, f["ndcg10"].mean)
            for _, o in points
        )
    )
    if front:
        ax.step(*zip(*front, strict=True), where="post", linestyle="--", color="grey")
    ax.set_xscale("log")
    ax.set_xlabel(f"{label} per query (log scale)")
    ax.set_ylabel("nDCG@10 (DL19 human qrels)")
    ax.set_title(f"{scenario} judge: nDCG@10 vs {label}")
    ax.grid(True, alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def write_outputs(
    records: Sequence[Record],
    ideal: dict[str, float],
    command: str,
    settings: str,
    calibration_lines: Sequence[str],
    out: Path,
) -> Path:
    """RESULTS.md in ``out``, figures and summary.json in ``out/results``; returns RESULTS.md."""
    figures_dir = out / "results"
    figures_dir.mkdir(parents=True, exist_ok=True)
    summary = summarize(records)
    ideal_mean = sum(ideal.values()) / len(ideal)
    scenarios = list(dict.fromkeys(scenario for scenario, _ in summary))
    parts = [
        "# Ranking benchmark: tierank's scheduler and baselines with simulated judges",
        "",
        f"Command: `{command}`",
        "",
        settings,
        "",
        "Figures are means per query over the queries (each first averaged over the seeds), "
        "with 95% percentile-bootstrap intervals over queries. Input tokens: every call is charged "
        "as one listwise prompt (query + the passages shown), ceil(characters / 4). Critical path: "
        "sequential judge round-trips. Simulated wall time: per round, 1.5 s + 1 ms per 100 input "
        "tokens of its slowest call, summed over rounds.",
        "",
        "blitzrank-kN: BlitzRank as ContextualAI's published code behaves, a verdict giving only "
        "its k−1 adjacent edges (blitzrank_published.py). blitzrank-all-pairs-kN: the same kind "
        "of rounds with all C(k,2) votes of a verdict (blitzrank.py), a stronger and costlier "
        "method, not BlitzRank.",
    ]
    for scenario in scenarios:
        parts += [
            "",
            f"## {scenario} judge",
            "",
            table(summary, scenario, ideal_mean),
            "",
            f"![nDCG@10 vs input tokens](results/{scenario}-ndcg-vs-tokens.png)",
            f"![nDCG@10 vs critical path](results/{scenario}-ndcg-vs-critical-path.png)",
        ]
        pareto_plot(
            summary,
            scenario,
            "input_tokens",
            "input tokens",
            figures_dir / f"{scenario}-ndcg-vs-tokens.png",
        )
        pareto_plot(
            summary,
            scenario,
            "critical_path",
            "critical path (round-trips)",
            figures_dir / f"{scenario}-ndcg-vs-critical-path.png",
        )
    target_lines = targets(records, summary)
    if target_lines:
        parts += ["", "## Targets, as measured", "", *target_lines]
    corrections = correction_lines(records, summary)
    if corrections:
        parts += [
            "",
            "## Position bias and judge weights",
            "",
            "Balanced positions: a batch is presented so that pairs shown together before are "
            "shown the other way round (the default); shuffle only: each judge's own seeded "
            "shuffle alone. Weighted by qualification (experiment.qualified_weights, measured on "
            'the other queries at seeds no run uses): "-weighted", each judge\'s log-odds of '
            'its pair accuracy; "-usable", 1 for each judge better than chance; either way 0 '
            "for a judge at chance.",
            "",
            *corrections,
        ]
    profiles = [
        rounds_profile(records, scenario, method)
        for scenario, method in summary
        if method.startswith("tierank")
    ]
    if profiles:
        parts += ["", "## tierank: calls per round", "", *profiles]
    if calibration_lines:
        parts += ["", "## Judge calibration", "", *calibration_lines]
    # The measurements behind the scheduler's constants are written by hand, once, and carried
    # here so that the scheduler's docstrings can cite this one file.
    parts += ["", CHOICES.read_text(encoding="utf-8").rstrip()]
    results_md = out / "RESULTS.md"
    results_md.write_text("\n".join(parts) + "\n", encoding="utf-8")
    (figures_dir / "summary.json").write_text(
        json.dumps(
            {
                "command": command,
                "ideal_ndcg10": ideal_mean,
                "methods": [
                    {"scenario": s, "method": m, **{k: asdict(v) for k, v in f.items()}}
                    for (s, m), f in summary.items()
                ],
            },
            indent=1,
        ),
        encoding="utf-8",
    )
    return results_md
