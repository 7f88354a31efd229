"""The Grafana dashboard in deploy/grafana asks only for series a real server exports: every
tierank_* name in every query is one that a freshly started server's /metrics lists; and it
shows every family the server exports."""

from __future__ import annotations

import json
import re
import sys
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "client"))

from cli_process import unused_address

from tierank.client import LocalServer

DASHBOARD = Path(__file__).resolve().parents[2] / "deploy" / "grafana" / "tierank.json"
_SERIES = re.compile(r"\btierank_[a-z0-9_]+")
# What a family of each type is scraped as, besides its own name.
_SUFFIXES = {"histogram": ("_bucket", "_count", "_sum"), "counter": ("", "_created")}


def _queries(dashboard: dict) -> list[tuple[str, str]]:
    """(panel title, query) for every query of every panel, rows' panels included."""
    found = []
    for panel in dashboard["panels"]:
        for inner in [panel, *panel.get("panels", [])]:
            found.extend((inner["title"], t["expr"]) for t in inner.get("targets", []))
    return found


def _exported(address: str) -> dict[str, set[str]]:
    """Each tierank family the server exports -> the names its series are scraped as."""
    with urllib.request.urlopen(f"http://{address}/metrics", timeout=10) as response:
        text = response.read().decode()
    families = {}
    for line in text.splitlines():
        if line.startswith("# TYPE tierank_"):
            _, _, name, kind = line.split()
            families[name] = {name + suffix for suffix in _SUFFIXES.get(kind, ("",))}
    return families


def test_every_dashboard_query_names_a_series_the_server_exports(tmp_path: Path):
    dashboard = json.loads(DASHBOARD.read_text())
    queries = _queries(dashboard)
    metrics_address = unused_address()
    with LocalServer(db=tmp_path / "tierank.db", extra_args=("--metrics-listen", metrics_address)):
        families = _exported(metrics_address)
    exported = set().union(*families.values())
    assert "tierank_judge_call_seconds_bucket" in exported  # the scrape is what it seems
    named = {(title, name) for title, query in queries for name in _SERIES.findall(query)}
    assert named, "the dashboard has no tierank query"
    unknown = sorted((title, name) for title, name in named if name not in exported)
    assert not unknown, unknown
    # Nothing the server exports is missing from the dashboard (jobs and studies by state too).
    shown = {name for _, name in named}
    assert "tierank_studies" in families and "tierank_jobs" in families
    # (A counter's creation time, a family of its own in the text format, is no series to show.)
    unshown = sorted(
        family
        for family, names in families.items()
        if not names & shown and not family.endswith("_created")
    )
    assert not unshown, unshown
    # Every panel that shows data has a query, and the sections the operators asked for exist.
    titles = {panel["title"] for panel in dashboard["panels"] if panel["type"] == "row"}
    assert titles == {
        "Throughput",
        "Judges by provider and model",
        "Spend",
        "Queue and leases per replica",
    }
    assert all(p.get("targets") for p in dashboard["panels"] if p["type"] != "row")
