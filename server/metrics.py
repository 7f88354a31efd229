"""Prometheus metrics; exposed over HTTP when --metrics-listen is set. docs/operations.md says
what each series means and how the dashboard in deploy/grafana uses it.

Every per-job series carries the `tenant` label, so a platform team sees each team's calls,
tokens, cost, jobs and rejections. Tenant names are ids an admin chose, never secrets.

Label values are bounded: tenants are made by admins, providers and outcomes are fixed lists,
and models, which a job spec names freely, pass through `model_label` (the first
MAX_MODELS_PER_PROVIDER of each provider keep their name, later ones count as "other"). No
series is labelled with a job, call or request id: those are in traces, which a latency
bucket's exemplar links to.
"""

from __future__ import annotations

import asyncio
import threading
import weakref
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator, Mapping
from contextlib import asynccontextmanager
from typing import Any, Protocol

from prometheus_client import REGISTRY, Counter, Gauge, Histogram, start_http_server
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from tierank.addresses import parse_address
from tierank.v1 import rank_pb2, study_pb2

MAX_MODELS_PER_PROVIDER = 32
OTHER_MODEL = "other"

JOBS_CREATED = Counter("tierank_jobs_created_total", "Jobs created", ["tenant"])
JOBS_FINISHED = Counter("tierank_jobs_finished_total", "Jobs finished", ["tenant", "reason"])
ACTIVE_JOBS = Gauge("tierank_active_jobs", "Jobs running on this server", ["tenant"])
UNFINISHED_JOBS = Gauge(
    "tierank_unfinished_jobs",
    "Jobs pending or running on any replica of this database, as this server last counted",
)
LEASE_TAKEOVERS = Counter(
    "tierank_lease_takeovers_total",
    "Unfinished jobs this server took up that another run left: a replica that died or "
    "drained, or this server's own run before a restart",
)
LEASES_LOST = Counter(
    "tierank_leases_lost_total", "Jobs this server stopped running because another took them"
)
VERDICTS = Counter("tierank_verdicts_total", "Verdicts recorded", ["tenant", "provider", "outcome"])
INPUT_TOKENS = Counter(
    "tierank_judge_input_tokens_total",
    "Input tokens judges used",
    ["tenant", "provider", "model"],
)
CACHED_INPUT_TOKENS = Counter(
    "tierank_judge_cached_input_tokens_total",
    "Input tokens judges used that the provider served from its prompt cache (a part of "
    "tierank_judge_input_tokens_total, charged at the cached price)",
    ["tenant", "provider", "model"],
)
CACHE_WRITE_INPUT_TOKENS = Counter(
    "tierank_judge_cache_write_input_tokens_total",
    "Input tokens judges used that the provider wrote to its prompt cache (a part of "
    "tierank_judge_input_tokens_total, charged at the cache-write price: Anthropic)",
    ["tenant", "provider", "model"],
)
OUTPUT_TOKENS = Counter(
    "tierank_judge_output_tokens_total",
    "Output tokens judges used",
    ["tenant", "provider", "model"],
)
COST_USD = Counter(
    "tierank_judge_cost_usd_total", "Judge cost in USD", ["tenant", "provider", "model"]
)
REJECTIONS = Counter(
    "tierank_quota_rejections_total", "Requests and calls refused by a quota", ["tenant", "limit"]
)
JUDGE_LATENCY = Histogram(
    "tierank_judge_call_seconds",
    "Judge call latency: time its requests were in flight, without waits for a slot",
    ["provider", "model"],
    buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 120),
)
JUDGE_WAIT = Histogram(
    "tierank_judge_wait_seconds",
    "Time an LLM judge call waited for a rate limit or a concurrency slot",
    ["provider", "model"],
    buckets=(0.001, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60),
)
JUDGE_RETRIES = Counter(
    "tierank_judge_retries_total",
    "LLM judge requests sent again after a retryable failure",
    ["provider", "model"],
)

PROVIDER_BATCHES = Counter(
    "tierank_provider_batches_total",
    "Provider batches (batch mode) this server submitted, and those it saw end, fail or cancelled",
    ["provider", "event"],
)
PROVIDER_BATCH_CALLS = Counter(
    "tierank_provider_batch_calls_total",
    "Calls of provider batches handed to this server's jobs, by outcome (answered, errored, "
    "expired, cancelled)",
    ["provider", "outcome"],
)

STUDIES_FINISHED = Counter(
    "tierank_studies_finished_total",
    "Studies this server ended, by final state",
    ["tenant", "state"],
)

_models: dict[str, set[str]] = {}


def model_label(provider: str, model: str) -> str:
    """`model` as a label value: its name while the provider has fewer than
    MAX_MODELS_PER_PROVIDER named ones, else "other" (a job spec names models freely)."""
    seen = _models.setdefault(provider, set())
    if model in seen:
        return model
    if len(seen) >= MAX_MODELS_PER_PROVIDER:
        return OTHER_MODEL
    seen.add(model)
    return model


class _Breaker(Protocol):
    @property
    def is_open(self) -> bool: ...


class _Breakers(Collector):
    """tierank_judge_breakers_open, read from the live breakers when scraped (a breaker opens
    and closes on its own clock: a gauge set on each change would be stale after a cool-down)."""

    def __init__(self) -> None:
        self._breakers: weakref.WeakKeyDictionary[_Breaker, tuple[str, str]] = (
            weakref.WeakKeyDictionary()
        )

    def track(self, provider: str, model: str, breaker: _Breaker) -> None:
        self._breakers[breaker] = (provider, model_label(provider, model))

    def collect(self) -> Iterator[GaugeMetricFamily]:
        family = GaugeMetricFamily(
            "tierank_judge_breakers_open",
            "Circuit breakers open now (one per provider account and model)",
            labels=["provider", "model"],
        )
        counts: dict[tuple[str, str], int] = {}
        for breaker, labels in list(self._breakers.items()):
            counts[labels] = counts.get(labels, 0) + breaker.is_open
        for labels, count in sorted(counts.items()):
            family.add_metric(list(labels), count)
        yield family


BREAKERS = _Breakers()
REGISTRY.register(BREAKERS)


def study_ended(tenant: str, state: int) -> None:
    """A study ended in `state` here (its driver, or a cancel of a draft)."""
    STUDIES_FINISHED.labels(tenant, study_pb2.StudyState.Name(state)).inc()


class _Counts(Protocol):
    @property
    def jobs(self) -> Mapping[tuple[str, int], int]: ...
    @property
    def studies(self) -> Mapping[tuple[str, int], int]: ...


# How long a scrape waits for the database's counts before it goes on without them.
COUNT_TIMEOUT_S = 5.0


# How the scrapes count: a coroutine run on the server's event loop.
_Count = Callable[[], Coroutine[Any, Any, _Counts]]


class _Unfinished(Collector):
    """tierank_jobs and tierank_studies: the jobs and studies of the whole database that have
    not ended, by tenant and state, counted when scraped. The scrape runs in the HTTP server's
    thread and the database belongs to the server's event loop: the count is asked of the loop.
    A (tenant, state) counted once stays, at 0 when none is left, so that a panel drops to 0
    rather than to no data."""

    _FAMILIES = (
        ("tierank_jobs", "Jobs pending or running, on any replica of this database", "jobs"),
        ("tierank_studies", "Studies in draft or running, in this database", "studies"),
    )

    def __init__(self) -> None:
        self._source: tuple[_Count, asyncio.AbstractEventLoop] | None = None
        self._seen: dict[str, set[tuple[str, int]]] = {"jobs": set(), "studies": set()}
        # Scrapes can come at once (one thread each).
        self._lock = threading.Lock()

    @asynccontextmanager
    async def counting(self, count: _Count) -> AsyncIterator[None]:
        """Scrapes count with `count` (run on the current event loop) for the block; a server
        started in the block (tests run several in one process) counts until it stops."""
        before = self._source
        self._source = (count, asyncio.get_running_loop())
        try:
            yield
        finally:
            self._source = before
            with self._lock:
                self._seen = {"jobs": set(), "studies": set()}

    def describe(self) -> Iterator[GaugeMetricFamily]:
        for name, documentation, _ in self._FAMILIES:
            yield GaugeMetricFamily(name, documentation, labels=["tenant", "state"])

    def collect(self) -> Iterator[GaugeMetricFamily]:
        source = self._source
        if source is None:
            return
        count, loop = source
        if _running_loop() is loop:
            return  # collected on the loop itself (in-process, not a scrape): it cannot wait
        future = asyncio.run_coroutine_threadsafe(count(), loop)
        try:
            counts = future.result(COUNT_TIMEOUT_S)
        except Exception:  # the database away, the loop stopping: the scrape goes on without
            future.cancel()
            return
        names = {"jobs": rank_pb2.JobState.Name, "studies": study_pb2.StudyState.Name}
        for name, documentation, kind in self._FAMILIES:
            counted: Mapping[tuple[str, int], int] = getattr(counts, kind)
            with self._lock:
                self._seen[kind].update(counted)
                seen = sorted(self._seen[kind])
            family = GaugeMetricFamily(name, documentation, labels=["tenant", "state"])
            for tenant, state in seen:
                family.add_metric([tenant, names[kind](state)], counted.get((tenant, state), 0))
            yield family


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


UNFINISHED = _Unfinished()
REGISTRY.register(UNFINISHED)


def expose(listen: str) -> str:
    """Serve the metrics over HTTP on `listen` (host:port, port 0 picks a free one); returns
    the bound host:port. A scraper that asks for OpenMetrics gets the exemplars too."""
    address = parse_address(listen, listening=True)
    host = address.host or "127.0.0.1"
    server, _ = start_http_server(address.port, addr=host)
    port = server.server_address[1]
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
