"""A study's report.json ("tierank.study.report/1") as one self-contained HTML page.

The page works offline and alone: inline CSS and inline SVG, no script, no font, no image, nothing
fetched. Every string taken from the report (system names, query ids, display names: users choose
them) goes through `_text` before it reaches the page, attributes included.

What grows with the study stays bounded: the per-query plot draws at most `MAX_QUERY_BARS` bars
(beyond that each bar is the mean of a run of consecutive sorted queries, and the page says so)
and the cost section lists only the `EXPENSIVE_QUERIES` most expensive queries, so a study of
10,000 queries makes a page of about the same size as one of 500.
"""

from __future__ import annotations

import html
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

MAX_QUERY_BARS = 500
EXPENSIVE_QUERIES = 10
JUDGED_MEASURE = "Judged@10"
# Plot geometry, in SVG user units (the SVGs scale down to narrow windows).
_PLOT_WIDTH = 900
_ROW_HEIGHT = 26
_AXIS_HEIGHT = 34
_LABEL_CHARS = 28
_CHAR_WIDTH = 7.2

_STYLE = """
:root { --fg:#1d2430; --muted:#5d6878; --line:#d5dae1; --bg:#fff; --panel:#f6f8fa;
  --accent:#2f6fdf; --good:#1f8a4c; --bad:#c2412d; --warn:#a86800; }
* { box-sizing: border-box; }
body { margin: 0; background: var(--bg); color: var(--fg);
  font: 15px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; }
main { max-width: 980px; margin: 0 auto; padding: 24px 20px 48px; }
h1 { font-size: 26px; margin: 0 0 2px; overflow-wrap: anywhere; }
h2 { font-size: 19px; margin: 34px 0 8px; padding-bottom: 4px;
  border-bottom: 1px solid var(--line); }
.sub { color: var(--muted); margin: 0 0 14px; overflow-wrap: anywhere; }
.facts { display: grid; grid-template-columns: repeat(auto-fill, minmax(190px, 1fr)); gap: 8px;
  margin: 12px 0; }
.fact { background: var(--panel); border-radius: 6px; padding: 8px 10px; overflow-wrap: anywhere; }
.fact b { display: block; font-size: 12px; font-weight: 600; color: var(--muted);
  letter-spacing: .02em; }
.badge { display: inline-block; padding: 1px 8px; border-radius: 10px; font-size: 13px;
  font-weight: 600; background: var(--panel); }
.badge.ok { background: #dff3e6; color: var(--good); }
.badge.no { background: #fbe3df; color: var(--bad); }
.badge.part { background: #fdf0d5; color: var(--warn); }
table { border-collapse: collapse; margin: 8px 0; font-variant-numeric: tabular-nums; }
th, td { padding: 4px 10px; border-bottom: 1px solid var(--line); text-align: right;
  vertical-align: top; }
th:first-child, td:first-child, .name { text-align: left; overflow-wrap: anywhere; }
thead th { font-size: 13px; color: var(--muted); }
.scroll { overflow-x: auto; }
.note { color: var(--muted); font-size: 14px; }
ul.verdicts { list-style: none; padding: 0; margin: 8px 0; }
ul.verdicts li { margin: 4px 0; padding: 6px 10px; border-left: 4px solid var(--line);
  background: var(--panel); overflow-wrap: anywhere; }
ul.verdicts li.yes { border-color: var(--good); }
ul.verdicts li.no { border-color: var(--warn); }
svg { display: block; max-width: 100%; height: auto; margin: 8px 0; }
svg text { font: 12px system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; fill: var(--fg); }
svg .tick text, svg text.value { fill: var(--muted); }
svg .grid { stroke: var(--line); }
svg .zero { stroke: var(--muted); stroke-dasharray: 3 3; }
svg .ci { stroke: var(--accent); stroke-width: 3; stroke-linecap: round; }
svg .mean { fill: var(--accent); stroke: #fff; stroke-width: 1.5; }
svg .top .ci { stroke: var(--good); } svg .top .mean { fill: var(--good); }
svg .bar { fill: var(--accent); }
svg .bar.pos { fill: var(--good); } svg .bar.neg { fill: var(--bad); }
svg text.pos-label { fill: var(--good); } svg text.neg-label { fill: var(--bad); }
td.cell { min-width: 3.5em; }
"""


@dataclass(frozen=True)
class _Interval:
    """One row of an interval plot: a label, a mean, and its interval (any may be missing)."""

    label: str
    mean: float | None
    low: float | None
    high: float | None
    highlight: bool = False


def render_report_html(report: Mapping[str, Any]) -> str:
    """The whole page for one report.json dict."""
    title = report.get("display_name") or report.get("study") or "study"
    sections = [
        _header(report),
        _systems_section(report),
        _comparisons_section(report),
        _per_query_section(report),
        _judged_section(report),
        _cost_section(report),
        _sample_section(report),
        _agreement_section(report),
    ]
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{_text(title)} — tierank study</title><style>{_STYLE}</style></head>"
        f"<body><main>{''.join(sections)}</main></body></html>\n"
    )


# --- sections ---------------------------------------------------------------------------------


def _header(report: Mapping[str, Any]) -> str:
    queries = report.get("queries") or {}
    total = queries.get("total", 0)
    complete = bool(report.get("complete"))
    state = str(report.get("state", "unknown"))
    state_class = {"succeeded": "ok", "failed": "no", "cancelled": "no"}.get(state, "part")
    confidence = _number(report.get("confidence"))
    facts = [
        ("State", f'<span class="badge {state_class}">{_text(state)}</span>'),
        (
            "Complete",
            '<span class="badge ok">yes</span>'
            if complete
            else '<span class="badge part">no</span>',
        ),
        (
            "Queries",
            f"{_count(total)} total · {_count(queries.get('settled', 0))} settled · "
            f"{_count(queries.get('provisional', 0))} provisional"
            + (f" · {_count(queries['unjudged'])} unjudged" if queries.get("unjudged") else ""),
        ),
        (
            "Means over",
            f"{_count(queries.get('judged', 0))} judged queries"
            + (
                f" ({_count(queries['not_judged'])} not judged: no labels)"
                if queries.get("not_judged")
                else ""
            ),
        ),
        ("Pool depth", _text(report.get("depth", "—"))),
        ("Labels", _text(report.get("labels", "—"))),
        ("Primary measure", _text(report.get("primary_measure", "—"))),
        ("Intervals", _method_words(report, confidence)),
        ("Systems", _count(len(report.get("systems") or []))),
    ]
    # Judges the study insisted on though a qualification found them no better than chance:
    # the labels rest on their votes, so the page says so before any figure.
    facts += [
        (
            "Unqualified judge",
            f'<span class="badge no">{_text(judge.get("judge", ""))}</span> in '
            f"{_count(judge.get('queries', 0))} "
            f"{_plural(int(judge.get('queries', 0)), 'query', 'queries')}: "
            f"{_text(judge.get('note', ''))}",
        )
        for judge in report.get("unqualified_judges") or []
    ]
    name = report.get("study", "")
    display = report.get("display_name") or name
    warnings = "".join(
        f'<li class="no">{_text(warning)}</li>' for warning in report.get("warnings") or []
    )
    return (
        f"<header><h1>{_text(display)}</h1>"
        f'<p class="sub">{_text(name)} · {_text(report.get("schema", ""))}</p>'
        + _facts(facts)
        + (f'<ul class="verdicts warnings">{warnings}</ul>' if warnings else "")
        + "</header>"
    )


def _method_words(report: Mapping[str, Any], confidence: float | None) -> str:
    """How the intervals were made, and what they include."""
    level = f"{confidence * 100:g}% " if confidence is not None else ""
    if report.get("interval_method") == "ppi":
        sample = report.get("sample") or {}
        return (
            f"{level}prediction-powered (ppi), from the human sample of "
            f"{_count(sample.get('queries', 0))} queries: the judge's error included"
        )
    return f"{level}bootstrap over the queries: the judge's own errors not included"


def _systems_section(report: Mapping[str, Any]) -> str:
    primary = str(report.get("primary_measure", ""))
    systems = _systems_in_order(report)
    rows = [
        _Interval(
            label=str(system.get("name", "")),
            mean=_number(_measure(system, primary).get("mean")),
            low=_number(_measure(system, primary).get("low")),
            high=_number(_measure(system, primary).get("high")),
            highlight=index == 0,
        )
        for index, system in enumerate(systems)
    ]
    heading = f"<h2>Systems by {_text(primary)}</h2>"
    if not systems:
        return heading + '<p class="note">The report has no systems.</p>'
    plot = _interval_plot(rows, "intervals", reference=None)
    if plot is None:
        plot = f'<p class="note">No system has a value for {_text(primary)}.</p>'
    return (
        heading + f'<p class="note">Mean per system with its {_confidence_words(report)} interval, '
        "best first.</p>" + plot + _measures_table(report, systems)
    )


def _measures_table(report: Mapping[str, Any], systems: Sequence[Mapping[str, Any]]) -> str:
    measures = [str(m) for m in report.get("measures") or []]
    primary = report.get("primary_measure")
    head = "".join(f"<th>{_text(m)}{' ★' if m == primary else ''}</th>" for m in measures)
    body = []
    for system in systems:
        cells = []
        for measure in measures:
            values = _measure(system, measure)
            mean = _number(values.get("mean"))
            if mean is None:
                cells.append('<td class="note">no value</td>')
                continue
            cells.append(
                f'<td>{_fmt(mean)}<br><span class="note">[{_fmt(values.get("low"))}, '
                f"{_fmt(values.get('high'))}]</span></td>"
            )
        body.append(
            f'<tr><td class="name">{_text(system.get("name", ""))}</td>'
            f"<td>{_count(system.get('queries', 0))}</td>{''.join(cells)}</tr>"
        )
    return (
        '<div class="scroll"><table><thead><tr><th>System</th><th>Queries</th>'
        f"{head}</tr></thead><tbody>{''.join(body)}</tbody></table></div>"
    )


def _comparisons_section(report: Mapping[str, Any]) -> str:
    comparisons = report.get("pairs") or report.get("comparisons") or []
    heading = "<h2>Which systems the study can tell apart</h2>"
    if not comparisons:
        count = len(report.get("systems") or [])
        reason = "Only one system: nothing to compare." if count == 1 else "No comparisons."
        return heading + f'<p class="note">{reason}</p>'
    items = []
    rows = []
    for comparison in comparisons:
        better = str(comparison.get("better", ""))
        worse = str(comparison.get("worse", ""))
        distinguishable = comparison.get("distinguishable") is True
        verdict = "distinguishable" if distinguishable else "not distinguishable"
        items.append(
            f'<li class="{"yes" if distinguishable else "no"}"><b>{_text(better)}</b> vs '
            f"<b>{_text(worse)}</b>: {_signed(comparison.get('difference'))} "
            f"[{_fmt(comparison.get('low'))}, {_fmt(comparison.get('high'))}], "
            f"{_p_value(comparison.get('p_value_adjusted', comparison.get('p_value')))}"
            f" — {verdict}</li>"
        )
        rows.append(
            _Interval(
                label=f"{better} − {worse}",
                mean=_number(comparison.get("difference")),
                low=_number(comparison.get("low")),
                high=_number(comparison.get("high")),
                highlight=distinguishable,
            )
        )
    measure = comparisons[0].get("measure", report.get("primary_measure", ""))
    plot = _interval_plot(rows, "differences", reference=0.0) or ""
    test = (
        "the t test of the prediction-powered difference"
        if report.get("interval_method") == "ppi"
        else "a paired randomization test"
    )
    return (
        heading + f'<p class="note">Every pair of systems, difference in {_text(measure)} with its '
        f"{_confidence_words(report)} interval and the p-value of {test} (two-sided), "
        f"Holm-adjusted for the {_count(len(comparisons))} pairs; a pair is told apart when "
        "that p-value is below 0.05 (green).</p>"
        + f'<ul class="verdicts">{"".join(items)}</ul>'
        + plot
    )


def _sample_section(report: Mapping[str, Any]) -> str:
    sample = report.get("sample")
    heading = "<h2>The study's labels against the human sample</h2>"
    if not sample:
        return (
            heading + '<p class="note">No human sample was given: the intervals are the '
            "bootstrap's, which do not include the judge's own errors "
            "(<code>tierank study sample</code>, then <code>tierank study calibrate</code>)."
            "</p>"
        )
    offsets = ", ".join(_fmt(o) for o in sample.get("grader_offsets") or [])
    facts = [
        ("Sample queries", _count(sample.get("queries", 0))),
        ("Documents both grade", _count(sample.get("pairs", 0))),
        ("Outside the pools", _count(sample.get("outside_pool", 0))),
        ("Cohen's κ", _fmt(sample.get("kappa"))),
        ("Weighted κ (linear)", _fmt(sample.get("weighted_kappa"))),
        ("Grader's noise", _fmt(sample.get("grader_noise"))),
        ("Grader's offsets (grades 0–3)", _text(offsets or "—")),
    ]
    grades = "".join(
        f"<li>human grade {_text(g.get('grade'))}: {_count(g.get('count', 0))} documents,"
        f" {_fmt(g.get('agreement'))} labelled the same</li>"
        for g in sample.get("grades") or []
    )
    return (
        heading + '<p class="note">Each sample query labelled as the study would have without its '
        "human grades (cross-fitted), against those grades; the sample's queries keep their "
        "human labels in qrels.txt.</p>"
        + _facts(facts)
        + (f"<ul>{grades}</ul>" if grades else "")
        + _confusion_table(sample.get("confusion") or {})
    )


def _per_query_section(report: Mapping[str, Any]) -> str:
    ranking = [str(name) for name in report.get("ranking") or []]
    primary = str(report.get("primary_measure", ""))
    heading = "<h2>Per query: the best two systems</h2>"
    if len(ranking) < 2:
        return heading + '<p class="note">Needs at least two ranked systems.</p>'
    first, second = ranking[0], ranking[1]
    differences: list[tuple[float, str]] = []
    missing = 0
    for entry in report.get("per_query") or []:
        measures = entry.get("measures") or {}
        a = _number((measures.get(first) or {}).get(primary))
        b = _number((measures.get(second) or {}).get(primary))
        if a is None or b is None:
            missing += 1
            continue
        differences.append((a - b, str(entry.get("query_id", ""))))
    differences.sort(key=lambda pair: -pair[0])
    first_wins = sum(1 for d, _ in differences if d > 0)
    second_wins = sum(1 for d, _ in differences if d < 0)
    ties = len(differences) - first_wins - second_wins
    counts = (
        f"<p><b>{_text(first)}</b> better on {_count(first_wins)} "
        f"{_plural(first_wins, 'query', 'queries')}, <b>{_text(second)}</b> better on "
        f"{_count(second_wins)}, equal on {_count(ties)}"
        + (f"; {_count(missing)} without a value for one of them" if missing else "")
        + ".</p>"
    )
    if not differences:
        return heading + counts + '<p class="note">No query has a value for both.</p>'
    note, plot = _difference_bars(differences, first, second)
    return (
        heading
        + counts
        + f'<p class="note">{_text(primary)} of {_text(first)} minus {_text(second)} per '
        f"query, sorted; green where {_text(first)} is better. {note}</p>" + plot
    )


def _judged_section(report: Mapping[str, Any]) -> str:
    if JUDGED_MEASURE not in (report.get("measures") or []):
        return ""
    systems = _systems_in_order(report)
    rows = [
        (str(s.get("name", "")), _number(_measure(s, JUDGED_MEASURE).get("mean"))) for s in systems
    ]
    added = [entry for entry in report.get("pooling") or [] if entry.get("round")]
    reuse = "".join(
        f"<li>{_text(entry.get('system', ''))} (added in round {_count(entry.get('round'))}): "
        f"{_fmt(entry.get('judged_before'))} of its top 10 judged before, "
        f"{_fmt(entry.get('judged_after'))} now, "
        f"{_count(entry.get('documents_added', 0))} documents judged for its round</li>"
        for entry in added
    )
    return (
        "<h2>Judged depth</h2>"
        f'<p class="note">{JUDGED_MEASURE}: the share of each system\'s top 10 that the '
        "study's labels cover; below 1, its measures count unjudged documents as not "
        "relevant.</p>" + _share_bars(rows) + (f'<ul class="reuse">{reuse}</ul>' if reuse else "")
    )


def _cost_section(report: Mapping[str, Any]) -> str:
    cost = report.get("cost") or {}
    facts = [
        ("Judge calls", _count(cost.get("calls", 0))),
        ("Input tokens", _count(cost.get("input_tokens", 0))),
        ("Output tokens", _count(cost.get("output_tokens", 0))),
        ("Cost", _usd(cost.get("cost_usd"))),
        ("Critical path", f"{_count(cost.get('critical_path', 0))} rounds (longest query)"),
        ("Wall time", _duration(cost.get("wall_seconds"))),
    ]
    section = "<h2>Cost</h2>" + _facts(facts)
    per_query = [entry for entry in report.get("per_query") or [] if entry.get("cost")]
    if not per_query:
        return section
    expensive = sorted(per_query, key=_query_expense, reverse=True)[:EXPENSIVE_QUERIES]
    rows = "".join(
        f'<tr><td class="name">{_text(entry.get("query_id", ""))}</td>'
        f"<td>{_count(entry['cost'].get('calls', 0))}</td>"
        f"<td>{_count(entry['cost'].get('input_tokens', 0))}</td>"
        f"<td>{_count(entry['cost'].get('output_tokens', 0))}</td>"
        f"<td>{_usd(entry['cost'].get('cost_usd'))}</td>"
        f"<td>{_count(entry['cost'].get('critical_path', 0))}</td>"
        f"<td>{_duration(entry['cost'].get('wall_seconds'))}</td>"
        f"<td>{_count(entry.get('pool_size', 0))}</td>"
        f"<td>{'settled' if entry.get('settled') else 'provisional'}</td></tr>"
        for entry in expensive
    )
    shown = (
        f"The {len(expensive)} most expensive of {_count(len(per_query))} queries"
        if len(per_query) > len(expensive)
        else "Every query"
    )
    return (
        section
        + f'<p class="note">{shown}, by cost, then calls, then tokens.</p>'
        + '<div class="scroll"><table><thead><tr><th>Query</th><th>Calls</th>'
        "<th>Input tokens</th><th>Output tokens</th><th>Cost</th><th>Critical path</th>"
        "<th>Wall time</th><th>Pool</th><th>Tiers</th></tr></thead>"
        f"<tbody>{rows}</tbody></table></div>"
    )


def _agreement_section(report: Mapping[str, Any]) -> str:
    agreement = report.get("agreement")
    heading = "<h2>Agreement with human qrels</h2>"
    if not agreement:
        return (
            heading + '<p class="note">No human qrels were given, so there is nothing to '
            "compare the study's labels with.</p>"
        )
    facts = [
        ("Pairs graded by both", _count(agreement.get("pairs", 0))),
        ("Cohen's κ", _fmt(agreement.get("kappa"))),
        ("Weighted κ (linear)", _fmt(agreement.get("weighted_kappa"))),
        ("Kendall τ (systems)", _fmt(agreement.get("kendall_tau"))),
        ("RBO (systems)", _fmt(agreement.get("rbo"))),
    ]
    return (
        heading
        + _facts(facts)
        + _confusion_table(agreement.get("confusion") or {})
        + _rankings_side_by_side(report, agreement)
    )


# --- pieces -----------------------------------------------------------------------------------


def _facts(facts: Sequence[tuple[str, str]]) -> str:
    """Labelled values in a grid of small panels; each value is HTML already."""
    panels = "".join(f'<div class="fact"><b>{label}</b> {value}</div>' for label, value in facts)
    return f'<div class="facts">{panels}</div>'


def _confusion_table(confusion: Mapping[str, Any]) -> str:
    grades = list(confusion.get("grades") or [])
    matrix = [list(row) for row in confusion.get("matrix") or []]
    if not grades or not matrix:
        return '<p class="note">No confusion matrix.</p>'
    largest = max((_number(v) or 0.0 for row in matrix for v in row), default=0.0) or 1.0
    head = "".join(f"<th>human {_text(g)}</th>" for g in grades)
    body = []
    for grade, row in zip(grades, matrix, strict=False):
        cells = []
        for value in row:
            share = (_number(value) or 0.0) / largest
            # A heat map: darker where more pairs fall, so the diagonal stands out.
            background = f"rgba(47,111,223,{0.08 + 0.5 * share:.2f})"
            cells.append(f'<td class="cell" style="background:{background}">{_count(value)}</td>')
        body.append(f"<tr><th>study {_text(grade)}</th>{''.join(cells)}</tr>")
    return (
        '<p class="note">Confusion matrix: rows are the study\'s grades, columns the human '
        "grades.</p>"
        f"<table><thead><tr><th></th>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"
    )


def _rankings_side_by_side(report: Mapping[str, Any], agreement: Mapping[str, Any]) -> str:
    primary = str(report.get("primary_measure", ""))
    study_ranking = [str(name) for name in report.get("ranking") or []]
    human_ranking = [str(name) for name in agreement.get("human_ranking") or []]
    study_means = {
        str(s.get("name", "")): _number(_measure(s, primary).get("mean"))
        for s in report.get("systems") or []
    }
    human_means = {
        str(name): _number((values or {}).get(primary))
        for name, values in (agreement.get("human_measures") or {}).items()
    }
    rows = []
    for position in range(max(len(study_ranking), len(human_ranking))):
        study = study_ranking[position] if position < len(study_ranking) else None
        human = human_ranking[position] if position < len(human_ranking) else None
        same = study is not None and study == human
        rows.append(
            f"<tr><td>{position + 1}</td>"
            + _ranked_cells(study, study_means)
            + _ranked_cells(human, human_means)
            + f"<td>{'=' if same else '≠'}</td></tr>"
        )
    return (
        f'<p class="note">System rankings by {_text(primary)}: the study\'s labels beside '
        "the human qrels.</p>"
        '<div class="scroll"><table><thead><tr><th>#</th><th class="name">Study labels</th>'
        '<th>mean</th><th class="name">Human qrels</th><th>mean</th><th></th></tr></thead>'
        f"<tbody>{''.join(rows)}</tbody></table></div>"
    )


def _ranked_cells(name: str | None, means: Mapping[str, float | None]) -> str:
    if name is None:
        return "<td></td><td></td>"
    return f'<td class="name">{_text(name)}</td><td>{_fmt(means.get(name))}</td>'


def _interval_plot(
    rows: Sequence[_Interval], css_class: str, reference: float | None
) -> str | None:
    """Dot and bar per row on one shared axis, with a dashed line at `reference` (differences
    are plotted against zero, and shown signed); None when no row has a value."""
    shown = _fmt if reference is None else _signed
    values = [v for r in rows for v in (r.mean, r.low, r.high) if v is not None]
    if not values:
        return None
    if reference is not None:
        values.append(reference)
    low, high = _padded_domain(min(values), max(values))
    ticks = _ticks(low, high)
    label_width = min(max(len(r.label) for r in rows), _LABEL_CHARS) * _CHAR_WIDTH + 16
    value_width = 190
    left, right = label_width, _PLOT_WIDTH - value_width
    height = len(rows) * _ROW_HEIGHT + _AXIS_HEIGHT + 8

    def x(value: float) -> float:
        return left + (value - low) / (high - low) * (right - left)

    parts = [_axis(ticks, x, top=4, bottom=len(rows) * _ROW_HEIGHT + 8)]
    if reference is not None:
        parts.append(
            f'<line class="zero" x1="{x(reference):.1f}" y1="4" x2="{x(reference):.1f}" '
            f'y2="{len(rows) * _ROW_HEIGHT + 8:.1f}"/>'
        )
    for index, row in enumerate(rows):
        y = 8 + index * _ROW_HEIGHT + _ROW_HEIGHT / 2
        interval = (
            f"[{_fmt(row.low)}, {_fmt(row.high)}]"
            if row.low is not None and row.high is not None
            else ""
        )
        mark = []
        if row.low is not None and row.high is not None:
            mark.append(
                f'<line class="ci" x1="{x(row.low):.1f}" y1="{y:.1f}" x2="{x(row.high):.1f}" '
                f'y2="{y:.1f}"/>'
            )
        if row.mean is not None:
            mark.append(f'<circle class="mean" cx="{x(row.mean):.1f}" cy="{y:.1f}" r="5"/>')
        value_text = f"{shown(row.mean)} {interval}" if row.mean is not None else "no value"
        parts.append(
            f'<g class="row{" top" if row.highlight else ""}">'
            f"<title>{_text(row.label)}: {_text(value_text)}</title>"
            f'<text x="{left - 10:.1f}" y="{y + 4:.1f}" text-anchor="end">'
            f"{_text(_shortened(row.label))}</text>"
            + "".join(mark)
            + f'<text class="value" x="{right + 12:.1f}" y="{y + 4:.1f}">'
            f"{_text(value_text)}</text></g>"
        )
    return (
        f'<svg class="{css_class}" viewBox="0 0 {_PLOT_WIDTH} {height:.0f}" '
        f'width="{_PLOT_WIDTH}" height="{height:.0f}" role="img">{"".join(parts)}</svg>'
    )


def _difference_bars(
    differences: Sequence[tuple[float, str]], first: str, second: str
) -> tuple[str, str]:
    """A note on what the bars are, and the SVG: one bar per query, or per run of queries
    (`differences` sorted, largest first, each `first`'s value minus `second`'s)."""
    per_bar = math.ceil(len(differences) / MAX_QUERY_BARS)
    groups = [differences[i : i + per_bar] for i in range(0, len(differences), per_bar)]
    if per_bar == 1:
        note = f"One bar per query ({_count(len(differences))})."
    else:
        note = (
            f"{_count(len(differences))} queries drawn as {len(groups)} bars (at most "
            f"{MAX_QUERY_BARS}): each bar is the mean of {per_bar} consecutive queries in "
            "sorted order."
        )
    bar_values = [sum(d for d, _ in group) / len(group) for group in groups]
    low, high = _padded_domain(min(0.0, *bar_values), max(0.0, *bar_values))
    ticks = _ticks(low, high)
    left, right, top, bottom = 56.0, _PLOT_WIDTH - 10.0, 8.0, 168.0

    def y(value: float) -> float:
        return bottom - (value - low) / (high - low) * (bottom - top)

    step = (right - left) / len(groups)
    # Gaps between bars only where bars are wide enough to show them.
    bar_width = step * 0.85 if step > 4 else step
    parts = [
        f'<text class="pos-label" x="{right}" y="{top + 12}" text-anchor="end">'
        f"▲ {_text(_shortened(first))} better</text>",
        f'<text class="neg-label" x="{right}" y="{bottom - 4}" text-anchor="end">'
        f"▼ {_text(_shortened(second))} better</text>",
    ]
    for tick in ticks:
        parts.append(
            f'<g class="tick"><line class="grid" x1="{left}" y1="{y(tick):.1f}" x2="{right}" '
            f'y2="{y(tick):.1f}"/><text x="{left - 6}" y="{y(tick) + 4:.1f}" '
            f'text-anchor="end">{_tick_label(tick, ticks)}</text></g>'
        )
    for index, (group, value) in enumerate(zip(groups, bar_values, strict=True)):
        top_y, bottom_y = sorted((y(value), y(0.0)))
        kind = "pos" if value > 0 else "neg" if value < 0 else "tie"
        label = (
            f"{group[0][1]}: {value:+.3f}"
            if len(group) == 1
            else f"{len(group)} queries ({group[0][1]} … {group[-1][1]}): mean {value:+.3f}"
        )
        parts.append(
            f'<rect class="bar {kind}" x="{left + index * step:.2f}" y="{top_y:.1f}" '
            f'width="{bar_width:.2f}" height="{max(bottom_y - top_y, 0.5):.1f}">'
            f"<title>{_text(label)}</title></rect>"
        )
    parts.append(
        f'<line class="zero" x1="{left}" y1="{y(0.0):.1f}" x2="{right}" y2="{y(0.0):.1f}"/>'
    )
    svg = (
        f'<svg class="per-query" viewBox="0 0 {_PLOT_WIDTH} 180" width="{_PLOT_WIDTH}" '
        f'height="180" role="img">{"".join(parts)}</svg>'
    )
    return note, svg


def _share_bars(rows: Sequence[tuple[str, float | None]]) -> str:
    """Horizontal bars on 0..1, one per system."""
    label_width = min(max((len(name) for name, _ in rows), default=1), _LABEL_CHARS) * 7.2 + 16
    left, right = label_width, _PLOT_WIDTH - 70.0
    height = len(rows) * _ROW_HEIGHT + _AXIS_HEIGHT + 8

    def x(value: float) -> float:
        return left + value * (right - left)

    ticks = _ticks(0.0, 1.0)
    parts = [_axis(ticks, x, top=4, bottom=len(rows) * _ROW_HEIGHT + 8)]
    for index, (name, value) in enumerate(rows):
        y = 8 + index * _ROW_HEIGHT
        bar = (
            f'<rect class="bar" x="{left:.1f}" y="{y + 5:.1f}" '
            f'width="{max(x(min(max(value, 0.0), 1.0)) - left, 0.5):.1f}" '
            f'height="{_ROW_HEIGHT - 10}"/>'
            if value is not None
            else ""
        )
        parts.append(
            f"<g><title>{_text(name)}: {_fmt(value) if value is not None else 'no value'}"
            f'</title><text x="{left - 10:.1f}" y="{y + _ROW_HEIGHT / 2 + 4:.1f}" '
            f'text-anchor="end">{_text(_shortened(name))}</text>{bar}'
            f'<text class="value" x="{right + 8:.1f}" y="{y + _ROW_HEIGHT / 2 + 4:.1f}">'
            f"{_fmt(value) if value is not None else 'no value'}</text></g>"
        )
    return (
        f'<svg class="judged" viewBox="0 0 {_PLOT_WIDTH} {height:.0f}" width="{_PLOT_WIDTH}" '
        f'height="{height:.0f}" role="img">{"".join(parts)}</svg>'
    )


def _axis(ticks: Sequence[float], x: Callable[[float], float], top: float, bottom: float) -> str:
    """Vertical grid lines with labelled ticks below the rows."""
    return "".join(
        f'<g class="tick"><line class="grid" x1="{x(t):.1f}" y1="{top}" x2="{x(t):.1f}" '
        f'y2="{bottom}"/><text x="{x(t):.1f}" y="{bottom + 16}" text-anchor="middle">'
        f"{_tick_label(t, ticks)}</text></g>"
        for t in ticks
    )


# --- numbers and words ------------------------------------------------------------------------


def _padded_domain(low: float, high: float) -> tuple[float, float]:
    """The axis range: the values plus a little room, never empty."""
    if high - low < 1e-9:
        pad = max(abs(high) * 0.1, 0.05)
        return low - pad, high + pad
    pad = (high - low) * 0.06
    return low - pad, high + pad


def _ticks(low: float, high: float, wanted: int = 6) -> list[float]:
    """Round tick values (1, 2 or 5 times a power of ten apart) inside [low, high]."""
    raw = (high - low) / wanted
    magnitude = 10 ** math.floor(math.log10(raw))
    step = next(m * magnitude for m in (1, 2, 5, 10) if m * magnitude >= raw)
    first = math.ceil(low / step)
    return [i * step for i in range(first, math.floor(high / step) + 1)]


def _tick_label(value: float, ticks: Sequence[float]) -> str:
    step = ticks[1] - ticks[0] if len(ticks) > 1 else 1.0
    # As many decimals as the step between ticks needs (0.05 two, 0.2 one, 5 none).
    decimals = next(d for d in range(10) if abs(round(step, d) - step) < 1e-9 * max(step, 1))
    text = f"{value:.{decimals}f}"
    return "0" if float(text) == 0 else text


def _number(value: Any) -> float | None:
    """A finite number, or None for null, NaN and anything that is not a number."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) else None


def _fmt(value: Any) -> str:
    number = _number(value)
    return "—" if number is None else f"{number:.3f}"


def _signed(value: Any) -> str:
    number = _number(value)
    return "—" if number is None else f"{number:+.3f}"


def _p_value(value: Any) -> str:
    number = _number(value)
    if number is None:
        return "p=—"
    return "p<0.001" if number < 0.001 else f"p={number:.2g}"


def _count(value: Any) -> str:
    number = _number(value)
    if number is None:
        return "—"
    return f"{number:,.0f}" if number == int(number) else f"{number:,}"


def _usd(value: Any) -> str:
    number = _number(value)
    if number is None:
        return "—"
    # Small studies cost cents: show them to the hundredth of a cent.
    return f"${number:,.4f}" if abs(number) < 1 else f"${number:,.2f}"


def _duration(value: Any) -> str:
    seconds = _number(value)
    if seconds is None:
        return "—"
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, rest = divmod(round(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes} min" if hours else f"{minutes} min {rest} s"


def _plural(count: int, one: str, many: str) -> str:
    return one if count == 1 else many


def _confidence_words(report: Mapping[str, Any]) -> str:
    confidence = _number(report.get("confidence"))
    return f"{confidence * 100:g}%" if confidence is not None else "bootstrap"


def _shortened(label: str) -> str:
    return label if len(label) <= _LABEL_CHARS else label[: _LABEL_CHARS - 1] + "…"


def _text(value: Any) -> str:
    """Any value from the report, safe in HTML text and in quoted attributes."""
    return html.escape(str(value), quote=True)


# --- reading the report -----------------------------------------------------------------------


def _systems_in_order(report: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """Systems in `ranking` order; any system the ranking leaves out comes after, as listed."""
    systems = list(report.get("systems") or [])
    position = {str(name): i for i, name in enumerate(report.get("ranking") or [])}
    return sorted(systems, key=lambda s: position.get(str(s.get("name", "")), len(position)))


def _measure(system: Mapping[str, Any], measure: str) -> Mapping[str, Any]:
    return (system.get("measures") or {}).get(measure) or {}


def _query_expense(entry: Mapping[str, Any]) -> tuple[float, float, float]:
    cost = entry.get("cost") or {}
    tokens = (_number(cost.get("input_tokens")) or 0.0) + (
        _number(cost.get("output_tokens")) or 0.0
    )
    return (_number(cost.get("cost_usd")) or 0.0, _number(cost.get("calls")) or 0.0, tokens)
