"""The study report as an HTML page: the rendered text, and what a real browser (Debian's
chromium, headless) shows of it.

The browser tests are skipped where chromium is missing, and fail there under
TIERANK_REQUIRE_CHROMIUM=1 (what `.ci/run` sets), so CI never passes without running them.
"""

from __future__ import annotations

import itertools
import os
import random
import re
import shutil
import struct
import subprocess
import time
import zlib
from collections import Counter
from collections.abc import Mapping, Sequence
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest

from tierank.client._study_html import EXPENSIVE_QUERIES, MAX_QUERY_BARS, render_report_html

PRIMARY = "nDCG@10"
MEASURES = [PRIMARY, "RR(rel=2)@10", "P@10", "AP", "Judged@10"]
HOSTILE = "<script>alert(1)</script>"
# Would mark the page if it ever ran: an escaped name must stay text.
MARKING_SCRIPT = "<script>document.documentElement.setAttribute('data-pwned','1')</script>"
MARKING_IMAGE = "<img src=x onerror=\"document.documentElement.setAttribute('data-pwned','2')\">"
# The page's colours (client/_study_html.py's style) for the best system's mark and the others'.
TOP_SYSTEM_GREEN = (0x1F, 0x8A, 0x4C)
SYSTEM_BLUE = (0x2F, 0x6F, 0xDF)


# --- a report of the schema's shape, made up ---------------------------------------------------


def make_report(
    systems: Sequence[str] = ("splade", "tasb", "bm25"),
    queries: int = 43,
    agreement: bool = False,
    measures: Sequence[str] = MEASURES,
    seed: int = 7,
) -> dict[str, Any]:
    """A report.json dict: per-query values drawn at random, means and intervals from them."""
    rng = random.Random(seed)
    strength = {name: 0.75 - 0.08 * i for i, name in enumerate(systems)}
    per_query = []
    for q in range(queries):
        values = {
            name: {
                m: round(min(1.0, max(0.0, rng.gauss(strength[name], 0.15))), 4) for m in measures
            }
            for name in systems
        }
        calls = rng.randint(3, 20)
        per_query.append(
            {
                "query_id": f"q{q:05d}",
                "job": f"jobs/{q:04x}",
                "settled": q % 9 != 0,
                "pool_size": rng.randint(20, 80),
                "measures": values,
                "cost": {
                    "calls": calls,
                    "input_tokens": calls * 3000,
                    "output_tokens": calls * 60,
                    "cost_usd": round(calls * 0.0021, 6),
                    "critical_path": rng.randint(2, 7),
                    "wall_seconds": round(rng.uniform(3, 40), 1),
                },
            }
        )
    system_entries = []
    for name in systems:
        summary = {}
        for m in measures:
            vals = [e["measures"][name][m] for e in per_query]
            mean = sum(vals) / len(vals) if vals else None
            summary[m] = {
                "mean": mean,
                "low": None if mean is None else mean - 0.04,
                "high": None if mean is None else mean + 0.04,
            }
        system_entries.append({"name": name, "queries": queries, "measures": summary})
    ranking = sorted(
        systems,
        key=lambda n: (
            -(next(s for s in system_entries if s["name"] == n)["measures"][PRIMARY]["mean"] or 0)
        ),
    )
    comparisons = [
        {
            "better": better,
            "worse": worse,
            "measure": PRIMARY,
            "difference": 0.021 + 0.05 * i,
            "low": 0.021 + 0.05 * i - (0.033 if i == 0 else 0.023),
            "high": 0.021 + 0.05 * i + (0.034 if i == 0 else 0.024),
            "p_value": 0.21 if i == 0 else 0.004,
            "distinguishable": i != 0,
        }
        for i, (better, worse) in enumerate(itertools.pairwise(ranking))
    ]
    report: dict[str, Any] = {
        "schema": "tierank.study.report/1",
        "study": "studies/0123abcd",
        "display_name": "dl19 three systems",
        "state": "succeeded",
        "complete": True,
        "depth": 20,
        "labels": "rank bands 1-10:3 11-30:2 31-100:1 below:0",
        "queries": {"total": queries, "settled": queries, "provisional": 0, "unjudged": 0},
        "primary_measure": PRIMARY,
        "measures": list(measures),
        "confidence": 0.95,
        "systems": system_entries,
        "ranking": ranking,
        "comparisons": comparisons,
        "per_query": per_query,
        "agreement": None,
        "cost": {
            "calls": sum(e["cost"]["calls"] for e in per_query),
            "input_tokens": sum(e["cost"]["input_tokens"] for e in per_query),
            "output_tokens": sum(e["cost"]["output_tokens"] for e in per_query),
            "cost_usd": 1.234,
            "critical_path": 7,
            "wall_seconds": 310.2,
        },
    }
    if agreement:
        report["agreement"] = {
            "pairs": 1234,
            "kappa": 0.41,
            "weighted_kappa": 0.62,
            "confusion": {
                "grades": [0, 1, 2, 3],
                "matrix": [[500, 40, 9, 1], [60, 200, 30, 5], [7, 50, 150, 20], [2, 6, 30, 104]],
            },
            "kendall_tau": 0.87,
            "rbo": 0.91,
            "human_ranking": list(reversed(ranking)),
            "human_measures": {name: {PRIMARY: 0.5 + 0.01 * i} for i, name in enumerate(systems)},
        }
    return report


# --- reading a page back ----------------------------------------------------------------------


class _Page(HTMLParser):
    """Tags, attributes and visible text of a page, as an HTML parser sees them; text of
    neighbouring elements is kept apart by a space except across the inline ones."""

    INLINE = frozenset({"b", "span", "tspan"})
    VOID = frozenset({"br", "meta", "img", "hr", "input", "link"})

    def __init__(self, page: str) -> None:
        super().__init__(convert_charrefs=True)
        self.elements: list[tuple[str, dict[str, str | None]]] = []
        # For each element, the classes of the elements it is inside.
        self.ancestors: list[frozenset[str]] = []
        self._open: list[tuple[str, frozenset[str]]] = []
        self.text_parts: list[str] = []
        self._skip = 0
        self.feed(page)
        self.close()
        self.text = " ".join("".join(self.text_parts).split())

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.elements.append((tag, dict(attrs)))
        self.ancestors.append(frozenset(c for _, classes in self._open for c in classes))
        if tag not in self.VOID:
            self._open.append((tag, frozenset((dict(attrs).get("class") or "").split())))
        self._separate(tag)
        if tag in ("style", "title"):
            self._skip += 1

    def handle_endtag(self, tag: str) -> None:
        while self._open and self._open.pop()[0] != tag:
            pass
        self._separate(tag)
        if tag in ("style", "title"):
            self._skip -= 1

    def _separate(self, tag: str) -> None:
        if tag not in self.INLINE:
            self.text_parts.append(" ")

    def handle_data(self, data: str) -> None:
        if not self._skip:
            self.text_parts.append(data)

    def with_class(
        self, tag: str, css_class: str, inside: str | None = None
    ) -> list[dict[str, str | None]]:
        """The `tag` elements of class `css_class`, only those within one of class `inside`."""
        return [
            attrs
            for (name, attrs), around in zip(self.elements, self.ancestors, strict=True)
            if name == tag
            and css_class in (attrs.get("class") or "").split()
            and (inside is None or inside in around)
        ]

    def marked(self) -> bool:
        return any("data-pwned" in attrs for _, attrs in self.elements)


def svg_block(page: str, css_class: str) -> str:
    match = re.search(rf'<svg class="{css_class}".*?</svg>', page, flags=re.S)
    assert match, f"no svg.{css_class}"
    return match.group(0)


def tick_labels(svg: str) -> list[str]:
    return re.findall(r'<g class="tick">.*?>([^<>]+)</text></g>', svg)


def mean_of(report: Mapping[str, Any], system: str, measure: str = PRIMARY) -> float:
    entry = next(s for s in report["systems"] if s["name"] == system)
    return float(entry["measures"][measure]["mean"])


# --- the rendered text ------------------------------------------------------------------------


def test_every_string_from_the_report_is_escaped():
    report = make_report(systems=(HOSTILE, "a&b", MARKING_IMAGE), queries=5)
    report["display_name"] = "<u>under</u> & co"
    report["labels"] = 'bands "quoted" <i>'
    report["per_query"][0]["query_id"] = "<q onmouseover=x>"
    page = render_report_html(report)

    assert "<script" not in page.lower()
    assert HOSTILE not in page and MARKING_IMAGE not in page
    assert html_escaped(HOSTILE) in page
    assert "a&amp;b" in page and "a&b" not in page
    parsed = _Page(page)
    tags = {tag for tag, _ in parsed.elements}
    assert not tags & {"script", "img", "u", "i", "q"}, tags
    assert not [a for _, attrs in parsed.elements for a in attrs if a.startswith("on")]
    # The names still read as themselves.
    for text in (HOSTILE, "a&b", "<u>under</u> & co", 'bands "quoted" <i>'):
        assert text in parsed.text


def html_escaped(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def test_header_says_what_the_study_is():
    report = make_report()
    report["complete"] = False
    report["queries"] = {"total": 43, "settled": 41, "provisional": 2, "unjudged": 0}
    text = _Page(render_report_html(report)).text
    for expected in (
        "dl19 three systems",
        "studies/0123abcd",
        "succeeded",
        "43 total · 41 settled · 2 provisional",
        "rank bands 1-10:3 11-30:2 31-100:1 below:0",
        "Primary measure nDCG@10",
        "Pool depth 20",
        "Complete no",
        "95% bootstrap",
    ):
        assert expected in text, expected


def test_systems_are_plotted_in_ranking_order_with_one_interval_each():
    report = make_report(systems=("bm25", "tasb", "splade", "colbert"))
    page = render_report_html(report)
    plot = svg_block(page, "intervals")
    labels = re.findall(r'text-anchor="end">([^<]+)</text>', plot)
    assert labels == report["ranking"]
    assert plot.count('class="ci"') == 4
    assert plot.count('class="mean"') == 4
    for name in report["ranking"]:
        assert f"{mean_of(report, name):.3f}" in plot
    # An axis with labelled ticks, each label its own.
    ticks = tick_labels(plot)
    assert len(ticks) >= 3 and len(set(ticks)) == len(ticks)


def test_the_measures_table_has_every_measure_of_every_system():
    report = make_report()
    text = _Page(render_report_html(report)).text
    for system in report["systems"]:
        for measure in MEASURES:
            values = system["measures"][measure]
            assert f"{values['mean']:.3f} [{values['low']:.3f}, {values['high']:.3f}]" in text


def test_null_means_read_as_no_value_and_leave_no_mark():
    report = make_report()
    nobody = report["ranking"][-1]
    for system in report["systems"]:
        system["measures"]["AP"] = {"mean": None, "low": None, "high": None}
        if system["name"] == nobody:
            system["measures"][PRIMARY] = {"mean": None, "low": None, "high": None}
    page = render_report_html(report)
    text = _Page(page).text
    assert "None" not in text and "nan" not in text.lower()
    assert text.count("no value") >= len(report["systems"]) + 1
    plot = svg_block(page, "intervals")
    assert plot.count('class="ci"') == len(report["systems"]) - 1


def test_no_primary_value_at_all_is_said_not_plotted():
    report = make_report()
    for system in report["systems"]:
        system["measures"][PRIMARY] = {"mean": None, "low": None, "high": None}
    page = render_report_html(report)
    assert 'class="intervals"' not in page
    assert "No system has a value for nDCG@10" in _Page(page).text


def test_comparisons_are_said_in_words():
    report = make_report()
    first, second, third = report["ranking"]
    text = _Page(render_report_html(report)).text
    assert f"{first} vs {second}: +0.021 [-0.012, 0.055], p=0.21 — not distinguishable" in text
    assert f"{second} vs {third}: +0.071 [0.048, 0.095], p=0.004 — distinguishable" in text


def test_one_system_has_nothing_to_compare():
    report = make_report(systems=("solo",))
    page = render_report_html(report)
    text = _Page(page).text
    assert "Only one system: nothing to compare" in text
    assert "Needs at least two ranked systems" in text
    assert 'class="per-query"' not in page
    assert svg_block(page, "intervals").count('class="ci"') == 1


def test_zero_queries_render():
    report = make_report(queries=0)
    page = render_report_html(report)
    text = _Page(page).text
    assert "0 total · 0 settled · 0 provisional" in text
    assert "No system has a value for nDCG@10" in text
    assert "No query has a value for both" in text
    assert 'class="per-query"' not in page


def test_per_query_counts_and_one_bar_per_query():
    report = make_report(queries=40)
    first, second = report["ranking"][:2]
    differences = [
        e["measures"][first][PRIMARY] - e["measures"][second][PRIMARY] for e in report["per_query"]
    ]
    wins = sum(d > 0 for d in differences)
    losses = sum(d < 0 for d in differences)
    page = render_report_html(report)
    text = _Page(page).text
    assert f"{first} better on {wins} queries, {second} better on {losses}, equal on " in text
    plot = svg_block(page, "per-query")
    assert len(re.findall(r'<rect class="bar', plot)) == 40
    # Sorted: the largest difference first.
    shown = [float(v) for v in re.findall(r"<title>q\d+: ([+-][\d.]+)</title>", plot)]
    assert shown == sorted(shown, reverse=True)
    assert shown[0] == pytest.approx(max(differences), abs=5e-4)


def test_queries_without_a_value_are_counted_apart():
    report = make_report(queries=10)
    first = report["ranking"][0]
    for entry in report["per_query"][:3]:
        entry["measures"][first][PRIMARY] = None
    page = render_report_html(report)
    assert "; 3 without a value for one of them." in _Page(page).text
    assert len(re.findall(r'<rect class="bar', svg_block(page, "per-query"))) == 7


def test_ten_thousand_queries_stay_a_reasonable_page():
    report = make_report(queries=10_000)
    started = time.perf_counter()
    page = render_report_html(report)
    seconds = time.perf_counter() - started
    size = len(page.encode())
    print(f"\n10,000 queries: {size:,} bytes of HTML in {seconds:.3f} s")
    plot = svg_block(page, "per-query")
    bars = len(re.findall(r'<rect class="bar', plot))
    assert bars <= MAX_QUERY_BARS
    assert f"10,000 queries drawn as {bars} bars (at most {MAX_QUERY_BARS})" in _Page(page).text
    assert size < 500_000
    assert seconds < 5


def test_judged_depth_only_when_measured():
    with_judged = render_report_html(make_report())
    assert 'class="judged"' in with_judged
    plot = svg_block(with_judged, "judged")
    assert plot.count('<rect class="bar"') == 3
    assert tick_labels(plot) == ["0", "0.2", "0.4", "0.6", "0.8", "1.0"]
    without = render_report_html(make_report(measures=[PRIMARY, "AP"]))
    assert "Judged depth" not in without and 'class="judged"' not in without


def test_cost_lists_totals_and_the_most_expensive_queries():
    report = make_report(queries=60)
    text = _Page(render_report_html(report)).text
    assert f"Judge calls {report['cost']['calls']:,}" in text
    assert "Cost $1.23" in text
    assert "Wall time 5 min 10 s" in text
    by_cost = sorted(report["per_query"], key=lambda e: -e["cost"]["cost_usd"])
    shown = re.findall(r"q\d{5}", text.split("most expensive")[1])
    assert len(shown) == EXPENSIVE_QUERIES
    assert by_cost[0]["query_id"] == shown[0]
    assert by_cost[-1]["query_id"] not in shown


def test_agreement_present():
    report = make_report(agreement=True)
    page = render_report_html(report)
    text = _Page(page).text
    for expected in ("Cohen's κ 0.410", "Weighted κ (linear) 0.620", "Kendall τ", "0.870", "0.910"):
        assert expected in text
    assert "study 2 7 50 150 20" in text
    human = report["agreement"]["human_ranking"]
    assert f"1 {report['ranking'][0]} " in text and f"{human[0]} 0.5" in text
    assert "No human qrels" not in text


def test_agreement_absent_says_so():
    text = _Page(render_report_html(make_report())).text
    assert "No human qrels were given" in text
    assert "Cohen's κ" not in text


def test_bootstrap_intervals_say_they_leave_the_judges_error_out():
    text = _Page(render_report_html(make_report())).text
    assert "95% bootstrap over the queries: the judge's own errors not included" in text
    assert "No human sample was given" in text


def test_prediction_powered_intervals_say_so_with_the_sample_and_every_pair():
    report = make_report()
    pairs = [
        {**comparison, "p_value_adjusted": min(1.0, 3 * comparison["p_value"])}
        for comparison in report["comparisons"]
    ]
    report.update(
        interval_method="ppi",
        pairs=pairs,
        queries={**report["queries"], "judged": 40, "not_judged": 3},
        warnings=["3 of the 43 queries were not judged (no judge answered them)"],
        sample={
            "queries": 10,
            "judgments": 566,
            "outside_pool": 4,
            "pairs": 562,
            "kappa": 0.38,
            "weighted_kappa": 0.54,
            "confusion": {"grades": [0, 1, 2, 3], "matrix": [[9, 1, 0, 0]] * 4},
            "grades": [{"grade": 0, "count": 291, "agreement": 0.84}],
            "grader_noise": 1.0,
            "grader_offsets": [0.0, 0.4, 0.0, 0.0],
        },
    )
    page = _Page(render_report_html(report))
    text = page.text
    assert "prediction-powered (ppi), from the human sample of 10 queries" in text
    assert "the judge's error included" in text
    assert "40 judged queries (3 not judged: no labels)" in text
    assert "3 of the 43 queries were not judged" in text
    assert "Holm-adjusted" in text and "t test of the prediction-powered difference" in text
    assert "Sample queries 10" in text and "Outside the pools 4" in text
    assert "human grade 0: 291 documents, 0.840 labelled the same" in text
    assert "0.000, 0.400, 0.000, 0.000" in text


# --- a real browser ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def chromium() -> str:
    return find_chromium()


def find_chromium() -> str:
    """chromium's path; where it is missing the test is skipped, or failed when CI requires it."""
    found = shutil.which("chromium")
    if found:
        return found
    if os.environ.get("TIERANK_REQUIRE_CHROMIUM"):
        pytest.fail("chromium not found and TIERANK_REQUIRE_CHROMIUM is set", pytrace=False)
    pytest.skip("chromium not found (apt-get install chromium)")


@pytest.mark.parametrize(
    ("required", "outcome"), [("1", pytest.fail.Exception), (None, pytest.skip.Exception)]
)
def test_a_missing_chromium_fails_only_where_required(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, required: str | None, outcome: type
):
    monkeypatch.setenv("PATH", str(tmp_path))
    if required:
        monkeypatch.setenv("TIERANK_REQUIRE_CHROMIUM", required)
    else:
        monkeypatch.delenv("TIERANK_REQUIRE_CHROMIUM", raising=False)
    with pytest.raises(outcome):
        find_chromium()


def browser(chromium: str, page: Path, *flags: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [chromium, "--headless", "--no-sandbox", "--disable-gpu", *flags, page.as_uri()],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )


def dumped_dom(chromium: str, page: Path) -> str:
    return browser(chromium, page, "--dump-dom").stdout


def test_the_browser_shows_every_system_and_runs_nothing(chromium: str, tmp_path: Path):
    report = make_report(systems=("splade", HOSTILE, "a&b", MARKING_SCRIPT, MARKING_IMAGE))
    page = tmp_path / "report.html"
    page.write_text(render_report_html(report), encoding="utf-8")

    dom = _Page(dumped_dom(chromium, page))

    for name in report["ranking"]:
        assert name in dom.text
        assert f"{mean_of(report, name):.3f}" in dom.text
    assert len(dom.with_class("svg", "intervals")) == 1
    assert len(dom.with_class("line", "ci", inside="intervals")) == len(report["systems"])
    assert not dom.marked(), "a name from the report ran as script"
    assert not [tag for tag, _ in dom.elements if tag in ("script", "img")]


def test_the_browser_check_would_see_a_name_that_ran(chromium: str, tmp_path: Path):
    """The check above is worth something: the same names unescaped do mark the page."""
    page = tmp_path / "unescaped.html"
    page.write_text(f"<!DOCTYPE html><html><body>{MARKING_SCRIPT}</body></html>")
    assert _Page(dumped_dom(chromium, page)).marked()


def test_a_screenshot_is_a_real_picture(chromium: str, tmp_path: Path):
    page = tmp_path / "report.html"
    page.write_text(render_report_html(make_report(agreement=True)), encoding="utf-8")
    picture = tmp_path / "report.png"
    # The header, the systems' plot and table: enough to see the page drew, small enough for
    # the pure-Python PNG decoder below to read in about a second.
    browser(chromium, page, f"--screenshot={picture}", "--window-size=1000,1200")

    width, height, pixels = decode_png(picture.read_bytes())
    assert (width, height) == (1000, 1200)
    colours = Counter(p[:3] for p in pixels)
    not_white = len(pixels) - colours[(255, 255, 255)]
    assert len(colours) > 20
    assert 0.02 < not_white / len(pixels) < 0.9
    # The plot's marks were drawn in their colours: the best system's, then the others'.
    assert colours[TOP_SYSTEM_GREEN] > 50 and colours[SYSTEM_BLUE] > 100


def decode_png(data: bytes) -> tuple[int, int, list[tuple[int, ...]]]:
    """Width, height and pixels of an 8-bit RGB or RGBA PNG (what chromium writes)."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    offset, idat, header = 8, b"", b""
    while offset < len(data):
        (length,) = struct.unpack(">I", data[offset : offset + 4])
        kind = data[offset + 4 : offset + 8]
        body = data[offset + 8 : offset + 8 + length]
        header = body if kind == b"IHDR" else header
        idat += body if kind == b"IDAT" else b""
        offset += 12 + length
    width, height, depth, colour_type = struct.unpack(">IIBB", header[:10])
    assert depth == 8 and colour_type in (2, 6), (depth, colour_type)
    channels = 3 if colour_type == 2 else 4
    raw = zlib.decompress(idat)
    stride = width * channels
    previous = bytearray(stride)
    pixels: list[tuple[int, ...]] = []
    for row in range(height):
        start = row * (stride + 1)
        kind, line = raw[start], bytearray(raw[start + 1 : start + 1 + stride])
        for i in range(stride):
            left = line[i - channels] if i >= channels else 0
            up = previous[i]
            up_left = previous[i - channels] if i >= channels else 0
            line[i] = (line[i] + unfilter(kind, left, up, up_left)) & 0xFF
        pixels.extend(tuple(line[i : i + channels]) for i in range(0, stride, channels))
        previous = line
    return width, height, pixels


def unfilter(kind: int, left: int, up: int, up_left: int) -> int:
    if kind == 0:
        return 0
    if kind == 1:
        return left
    if kind == 2:
        return up
    if kind == 3:
        return (left + up) // 2
    guess = left + up - up_left
    distances = (abs(guess - left), abs(guess - up), abs(guess - up_left))
    return (left, up, up_left)[distances.index(min(distances))]
