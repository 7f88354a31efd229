"""Prometheus metrics; exposed over HTTP when --metrics-listen is set.

Every per-job series carries the `tenant` label, so a platform team sees each team's calls,
tokens, cost, jobs and rejections. Tenant names are ids an admin chose, never secrets.
"""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram, start_http_server

from tierank.addresses import parse_address

JOBS_CREATED = Counter("tierank_jobs_created_total", "Jobs created", ["tenant"])
JOBS_FINISHED = Counter("tierank_jobs_finished_total", "Jobs finished", ["tenant", "reason"])
ACTIVE_JOBS = Gauge("tierank_active_jobs", "Jobs running on this server", ["tenant"])
VERDICTS = Counter("tierank_verdicts_total", "Verdicts recorded", ["tenant", "provider", "outcome"])
INPUT_TOKENS = Counter(
    "tierank_judge_input_tokens_total", "Input tokens judges used", ["tenant", "provider"]
)
OUTPUT_TOKENS = Counter(
    "tierank_judge_output_tokens_total", "Output tokens judges used", ["tenant", "provider"]
)
COST_USD = Counter("tierank_judge_cost_usd_total", "Judge cost in USD", ["tenant", "provider"])
REJECTIONS = Counter(
    "tierank_quota_rejections_total", "Requests and calls refused by a quota", ["tenant", "limit"]
)
JUDGE_LATENCY = Histogram(
    "tierank_judge_call_seconds",
    "Judge call latency",
    ["provider"],
    buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 120),
)


def expose(listen: str) -> str:
    """Serve the metrics over HTTP on `listen` (host:port, port 0 picks a free one); returns
    the bound host:port."""
    address = parse_address(listen, listening=True)
    host = address.host or "127.0.0.1"
    server, _ = start_http_server(address.port, addr=host)
    port = server.server_address[1]
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
