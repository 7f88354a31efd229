"""Prometheus metrics; exposed over HTTP when --metrics-listen is set."""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram, start_http_server

JOBS_CREATED = Counter("tierank_jobs_created_total", "Jobs created")
JOBS_FINISHED = Counter("tierank_jobs_finished_total", "Jobs finished", ["reason"])
ACTIVE_JOBS = Gauge("tierank_active_jobs", "Jobs running on this server")
VERDICTS = Counter("tierank_verdicts_total", "Verdicts recorded", ["provider", "outcome"])
JUDGE_LATENCY = Histogram(
    "tierank_judge_call_seconds",
    "Judge call latency",
    ["provider"],
    buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 120),
)


def expose(listen: str) -> None:
    host, _, port = listen.rpartition(":")
    start_http_server(int(port), addr=host or "127.0.0.1")
