"""Service benchmark on PostgreSQL: SQLite beside 1, 2 and 3 replicas in one run, then failover.

    python -m tierank.bench.replicas_bench                     # both parts, 7-8 minutes
    python -m tierank.bench.replicas_bench --part throughput   # SQLite vs PostgreSQL x1, x2, x3
    python -m tierank.bench.replicas_bench --part failover     # kill -9 -> first new verdict

PostgreSQL is the server of TIERANK_TEST_POSTGRES_URL (default
postgresql://postgres@127.0.0.1:5432/test, or --postgres). The benchmark creates a database of
its own there, so that pg_stat_database counts its servers' traffic and nothing else, a schema
in it per configuration, and drops the database at the end. Every server is a process started
here on loopback and stopped by its PID.

Throughput: the service benchmark's workload (jobs of N=100, top-10, k=10, the `oracle` judge
with zero latency, one watcher per job) against one SQLite server and against 1, 2 and 3
replicas on PostgreSQL. The configurations alternate over --rounds rounds, every other round in
reverse order, so that the machine's drift falls on all of them alike. Jobs are created
round-robin over the replicas; with two or more, each job's watcher is on the next replica
(across), and the workload runs again with each watcher on the replica that created the job
(within). Workloads: --jobs (100) jobs at once; --small-jobs (10) jobs, --small-repeats times;
and those 10 jobs again with a judge latency of --paced-latency-ms (300) and their starts
spread over it, so that the machine is not saturated and latencies show the path from a commit
to a watcher rather than a queue for the CPU. Printed per configuration and workload:
verdicts/s and its ratio to SQLite, tiers write->watcher p50/p99 (all rounds' samples
together); for the first workload, per verdict: CPU (servers, PostgreSQL's backends, this
client, from /proc/PID/stat) and on PostgreSQL transactions (pg_stat_database xact_commit +
xact_rollback: the storage sends one statement per transaction but for job creation, whose
statements travel pipelined, so this counts the round trips; pg_stat_statements calls too where
that extension is loaded), commits that notified (counted by a listener of the benchmark's
own), rows written, WAL bytes (pg_wal_lsn_diff of pg_current_wal_lsn: cluster-wide, so what
other databases wrote meanwhile counts too; their transactions are shown beside it), WAL syncs
(pg_stat_wal) and bytes stored (growth of tables, indexes and TOAST). The statistics include
the idle replicas' own traffic (heartbeats, about 2 transactions a second each) over the run
and STATS_SETTLE_S. Where pg_stat_statements is loaded, each statement's calls per verdict,
mean time (lock waits included) and WAL per call are printed too.

Failover: three replicas with --lease-seconds; a job (N=100, full order, `oracle` with
--judge-latency-ms per call) created on one replica and watched from another. Once it runs,
its replica is killed (SIGKILL) at a random point of the lease-renewal cycle, and the time is
taken from the kill to the job's lease moving (polled in the jobs table), to the first verdict
stored after the kill (its event time, stamped by the replica that took over) and to the
watcher receiving it. The job is then cancelled, the dead replica replaced, and the next trial
starts.
"""

from __future__ import annotations

import argparse
import asyncio
import ipaddress
import os
import random
import secrets
import signal
import statistics
import sys
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from tempfile import TemporaryDirectory
from urllib.parse import quote, urlsplit, urlunsplit

import grpc
import psycopg
from psycopg import sql

from tierank.bench.service_bench import Tally, cpu_seconds, make_spec, percentile, run_job
from tierank.client import LocalServer
from tierank.v1 import rank_pb2, rank_pb2_grpc

DEFAULT_POSTGRES = "postgresql://postgres@127.0.0.1:5432/test"
# A backend reports its statistics (pg_stat_database, pg_stat_wal) at most once a second, and
# one that went idle within a second of its last report only after 10 s more: read this long
# after a workload they hold all of it (measured: the counts stop growing after about 7 s).
STATS_SETTLE_S = 11.0
# Replicas renew their leases this often (server/jobs/replica.py: at most once a second).
RENEWAL_S = 1.0
LEASE_POLL_S = 0.02
SERVER_ARGS = ("--log-level", "warning")


# -- PostgreSQL: a database of the benchmark's own, and its counters ---------------------------


def url_with(url: str, *, database: str | None = None, schema: str | None = None) -> str:
    """`url` naming another database, and/or with `schema` first on the search path."""
    parts = urlsplit(url)
    query = parts.query
    if schema is not None:
        option = "options=" + quote(f"-csearch_path={schema}")
        query = f"{query}&{option}" if query else option
    path = f"/{database}" if database is not None else parts.path
    return urlunsplit(parts._replace(path=path, query=query))


@contextmanager
def bench_database(admin_url: str) -> Iterator[str]:
    """A fresh database on the server of `admin_url` (its URL), dropped at the end."""
    name = f"tierank_bench_{secrets.token_hex(4)}"
    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    try:
        yield url_with(admin_url, database=name)
    finally:
        with psycopg.connect(admin_url, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP DATABASE {} WITH (FORCE)").format(sql.Identifier(name)))


def create_schema(db_url: str, schema: str) -> str:
    """The URL of `db_url` with a new `schema` first on its search path."""
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(schema)))
    return url_with(db_url, schema=schema)


@dataclass(frozen=True)
class PgCounters:
    """Cumulative counters; the difference of two readings is what happened between them."""

    transactions: int
    statements: int  # pg_stat_statements calls; 0 where the extension is not loaded
    rows_inserted: int
    rows_updated: int
    rows_deleted: int
    wal_bytes: int
    wal_syncs: int
    other_transactions: int  # every other database of the cluster (they share the WAL)
    stored_bytes: int
    backend_cpu_s: float

    def with_statistics_of(self, later: PgCounters) -> PgCounters:
        """These counters, with the statistics that backends report late taken from `later`."""
        return replace(self, **{name: getattr(later, name) for name in REPORTED_LATE})

    def minus(self, before: PgCounters) -> PgCounters:
        return PgCounters(
            *(getattr(self, f.name) - getattr(before, f.name) for f in fields(PgCounters))
        )

    @staticmethod
    def sum(deltas: list[PgCounters]) -> PgCounters:
        return PgCounters(*(sum(getattr(d, f.name) for d in deltas) for f in fields(PgCounters)))


# From the statistics system (see STATS_SETTLE_S); the rest is known at once.
REPORTED_LATE = (
    "transactions",
    "statements",
    "rows_inserted",
    "rows_updated",
    "rows_deleted",
    "wal_syncs",
    "other_transactions",
)

_DATABASE_COUNTERS = """
SELECT d.xact_commit + d.xact_rollback, d.tup_inserted, d.tup_updated, d.tup_deleted,
    pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')::bigint, w.wal_sync,
    (SELECT COALESCE(SUM(o.xact_commit + o.xact_rollback), 0)::bigint FROM pg_stat_database o
     WHERE o.datname IS NOT NULL AND o.datname <> d.datname)
FROM pg_stat_database d, pg_stat_wal w WHERE d.datname = %s
"""
_OURS = (
    "FROM pg_stat_statements "
    "WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())"
)
_STORED_BYTES = """
SELECT COALESCE(SUM(pg_total_relation_size(c.oid)), 0)::bigint FROM pg_class c
JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = %s AND c.relkind = 'r'
"""


class PgMeter:
    """Reads the benchmark database's counters: statistics views through `admin_url` (another
    database, so that reading adds nothing to what is counted), table sizes through a
    connection of its own to `db_url`, and, where the server runs on this machine, its
    backends' CPU time from /proc."""

    def __init__(self, admin_url: str, db_url: str) -> None:
        self._database = urlsplit(db_url).path.lstrip("/")
        self._admin = psycopg.connect(admin_url, autocommit=True)
        self._own = psycopg.connect(db_url, autocommit=True)
        host = urlsplit(db_url).hostname or "localhost"
        self.local = host == "localhost" or host.startswith("/") or _loopback(host)
        self.has_statements = self._load_statements()
        self._db_url = db_url
        # The meter's own backends are not the servers' cost.
        self._own_pids = {self._own.info.backend_pid}

    def close(self) -> None:
        self._admin.close()
        self._own.close()

    def _load_statements(self) -> bool:
        try:
            self._own.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
            self._own.execute("SELECT 1 FROM pg_stat_statements LIMIT 1")
        except psycopg.Error:  # not in shared_preload_libraries: only the fallback counts
            return False
        return True

    def read(self, schema: str) -> PgCounters:
        row = self._admin.execute(_DATABASE_COUNTERS, (self._database,)).fetchone()
        assert row is not None  # the database exists while the benchmark runs
        transactions, inserted, updated, deleted, wal, syncs, others = row
        stored = self._own.execute(_STORED_BYTES, (schema,)).fetchone()
        return PgCounters(
            transactions=transactions,
            statements=self._statements(),
            rows_inserted=inserted,
            rows_updated=updated,
            rows_deleted=deleted,
            wal_bytes=wal,
            wal_syncs=syncs,
            other_transactions=others,
            stored_bytes=stored[0] if stored else 0,
            backend_cpu_s=self._backend_cpu_s(),
        )

    def _statements(self) -> int:
        if not self.has_statements:
            return 0
        # The view lives where the extension was created: in the benchmark's database.
        row = self._own.execute(f"SELECT COALESCE(SUM(calls), 0)::bigint {_OURS}").fetchone()
        return row[0] if row else 0

    def reset_statements(self) -> None:
        """Start pg_stat_statements' per-statement counts of this database afresh."""
        if self.has_statements:
            self._own.execute(
                "SELECT pg_stat_statements_reset(0, "
                "(SELECT oid FROM pg_database WHERE datname = current_database()), 0)"
            )

    def statements_by_text(self) -> dict[str, StatementCost]:
        """What each statement of this database cost since `reset_statements`."""
        if not self.has_statements:
            return {}
        rows = self._own.execute(
            "SELECT regexp_replace(query, '\\s+', ' ', 'g'), calls, total_exec_time, "
            f"wal_bytes::bigint {_OURS}"
        ).fetchall()
        # One text can have several entries (its parameters typed differently): summed.
        costs: dict[str, StatementCost] = {}
        for text, calls, ms, wal in rows:
            _merge(costs, text, StatementCost(calls, ms, wal))
        return costs

    def _backend_cpu_s(self) -> float:
        """CPU seconds of the database's backends alive now (a backend that exited between
        two readings takes its time with it; the servers' pools keep theirs open)."""
        if not self.local:
            return 0.0
        rows = self._admin.execute(
            "SELECT pid FROM pg_stat_activity WHERE datname = %s AND NOT pid = ANY(%s)",
            (self._database, list(self._own_pids)),
        ).fetchall()
        total = 0.0
        for (pid,) in rows:
            with suppress(FileNotFoundError, ProcessLookupError):  # gone since the query
                total += cpu_seconds(pid)
        return total

    @contextmanager
    def counting_notifications(self, schema: str) -> Iterator[NotificationCount]:
        """Counts what the servers on `schema` notify (one per commit that stores events,
        and what every replica's listener receives), from a thread of its own."""
        counted = NotificationCount()
        stop = threading.Event()
        with psycopg.connect(self._db_url, autocommit=True) as conn:
            self._own_pids.add(conn.info.backend_pid)
            # The servers' channel (server/storage/postgres/): one per schema.
            conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(f"tierank:{schema}")))

            def count() -> None:
                while not stop.is_set():
                    for notice in conn.notifies(timeout=0.1):
                        # "events JOB SEQUENCE"; the others hand a lease back or cancel.
                        counted.events += notice.payload.startswith("events ")

            listener = threading.Thread(target=count, name="notifications")
            listener.start()
            try:
                yield counted
            finally:
                stop.set()
                listener.join()
                self._own_pids.discard(conn.info.backend_pid)


@dataclass(frozen=True)
class StatementCost:
    calls: int
    total_ms: float  # execution time, waits for locks included
    wal_bytes: int

    def plus(self, other: StatementCost) -> StatementCost:
        return StatementCost(
            self.calls + other.calls,
            self.total_ms + other.total_ms,
            self.wal_bytes + other.wal_bytes,
        )


def _merge(costs: dict[str, StatementCost], text: str, cost: StatementCost) -> None:
    costs[text] = costs[text].plus(cost) if text in costs else cost


@dataclass
class NotificationCount:
    events: int = 0  # commits that stored events


def _loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


# -- servers --------------------------------------------------------------------------------


def start_servers(db: str | Path, count: int, extra: tuple[str, ...]) -> list[LocalServer]:
    """`count` server processes on `db`, started together; all stopped if one fails."""
    servers = [LocalServer(db=db, extra_args=(*SERVER_ARGS, *extra)) for _ in range(count)]
    try:
        with ThreadPoolExecutor(count) as starting:
            list(starting.map(LocalServer.start, servers))
    except BaseException:
        stop_servers(servers)
        raise
    return servers


def stop_servers(servers: list[LocalServer]) -> None:
    for server in servers:
        server.stop()


def servers_cpu_s(servers: list[LocalServer]) -> float:
    return sum(cpu_seconds(s.pid) for s in servers if s.pid is not None)


# -- throughput -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Config:
    name: str
    replicas: int
    postgres: bool

    @property
    def placements(self) -> tuple[str, ...]:
        return ("across", "within") if self.replicas > 1 else ("within",)


@dataclass(frozen=True)
class Workload:
    jobs: int
    repeats: int  # run one after the other, counted as one phase
    n: int
    top_k: int
    text_words: int
    # With a judge latency, jobs start spread over one call's latency: the load is paced, so
    # that latencies show the path from commit to watcher rather than a queue for the CPU.
    judge_latency_ms: float = 0.0

    @property
    def label(self) -> str:
        paced = f", judge {self.judge_latency_ms:g} ms" if self.judge_latency_ms else ""
        return f"{self.jobs} jobs{paced}"

    def spec(self, seed: int) -> rank_pb2.JobSpec:
        options = {"latency_ms": f"{self.judge_latency_ms:g}"} if self.judge_latency_ms else {}
        return make_spec(self.n, self.top_k, seed, self.text_words, **options)


@dataclass
class Phase:
    verdicts: int = 0
    wall_s: float = 0.0
    latencies_ms: list[float] = field(default_factory=list)
    server_cpu_s: float = 0.0
    client_cpu_s: float = 0.0
    pg: PgCounters | None = None
    notified: int = 0  # commits that stored events, each notified to every replica
    statements: dict[str, StatementCost] = field(default_factory=dict)  # pg_stat_statements


async def run_workload(addresses: list[str], workload: Workload, across: bool) -> Phase:
    """The jobs created round-robin over `addresses`, each watched on the next replica
    (`across`) or on its own; `repeats` times in a row."""
    channels = [grpc.aio.insecure_channel(address) for address in addresses]
    stubs = [rank_pb2_grpc.RankServiceStub(channel) for channel in channels]
    shift = 1 if across else 0
    phase = Phase()
    try:
        for _ in range(workload.repeats):
            specs = [workload.spec(seed) for seed in range(workload.jobs)]
            spread_s = workload.judge_latency_ms / 1000
            tally = Tally()
            started = time.perf_counter()
            await asyncio.gather(
                *(
                    _after(
                        random.uniform(0, spread_s),
                        run_job(
                            stubs[i % len(stubs)],
                            spec,
                            tally,
                            watch_stub=stubs[(i + shift) % len(stubs)],
                        ),
                    )
                    for i, spec in enumerate(specs)
                )
            )
            phase.wall_s += time.perf_counter() - started
            phase.verdicts += tally.verdicts
            phase.latencies_ms += tally.latencies_ms
    finally:
        for channel in channels:
            await channel.close()
    return phase


async def _after(delay_s: float, job: Awaitable[None]) -> None:
    await asyncio.sleep(delay_s)
    await job


def measure(
    servers: list[LocalServer],
    workload: Workload,
    across: bool,
    meter: PgMeter | None,
    schema: str,
) -> Phase:
    addresses = [s.address for s in servers]
    if meter is None:
        return _timed(servers, lambda: asyncio.run(run_workload(addresses, workload, across)))
    # Read with settled statistics (what came before has had STATS_SETTLE_S to be reported).
    meter.reset_statements()
    before = meter.read(schema)
    with meter.counting_notifications(schema) as notified:
        phase = _timed(servers, lambda: asyncio.run(run_workload(addresses, workload, across)))
        # The WAL position now, the statistics once reported: the WAL is the whole cluster's,
        # and other databases go on writing while the statistics settle.
        end = meter.read(schema)
        time.sleep(STATS_SETTLE_S)
        phase.pg = end.with_statistics_of(meter.read(schema)).minus(before)
    phase.notified = notified.events
    phase.statements = meter.statements_by_text()
    return phase


def _timed(servers: list[LocalServer], run: Callable[[], Phase]) -> Phase:
    """`run`'s phase with the CPU time the servers and this client spent on it."""
    cpu_before, client_before = servers_cpu_s(servers), time.process_time()
    phase = run()
    phase.server_cpu_s = servers_cpu_s(servers) - cpu_before
    phase.client_cpu_s = time.process_time() - client_before
    return phase


# (configuration, placement, index of the workload): a phase per round.
Results = dict[tuple[str, str, int], list[Phase]]


def run_config(
    config: Config,
    round_index: int,
    workloads: list[Workload],
    db_url: str,
    meter: PgMeter,
    results: Results,
) -> None:
    with TemporaryDirectory(prefix="tierank-bench-") as tmp:
        schema = f"bench_{config.replicas}_{round_index}"
        db: str | Path = (
            create_schema(db_url, schema) if config.postgres else Path(tmp) / "bench.db"
        )
        pg_meter = meter if config.postgres else None
        servers = start_servers(db, config.replicas, ())
        try:
            # One job per replica first: imports, prepared statements and caches warm up.
            warm_up = Workload(config.replicas, 1, workloads[0].n, workloads[0].top_k, 10)
            asyncio.run(run_workload([s.address for s in servers], warm_up, across=False))
            if pg_meter:
                time.sleep(STATS_SETTLE_S)
            for index, workload in enumerate(workloads):
                # The database's costs are taken from the first (larger) workload only: each
                # reading waits STATS_SETTLE_S.
                costs = pg_meter if index == 0 else None
                for placement in config.placements:
                    phase = measure(servers, workload, placement == "across", costs, schema)
                    results.setdefault((config.name, placement, index), []).append(phase)
                    print(
                        f"  round {round_index + 1} {config.name:14s} {placement:6s} "
                        f"{workload.label} x{workload.repeats}: "
                        f"{phase.verdicts / phase.wall_s:6.0f} verdicts/s, tiers p99 "
                        f"{percentile(phase.latencies_ms, 0.99):6.1f} ms",
                        flush=True,
                    )
        finally:
            stop_servers(servers)


def throughput(args: argparse.Namespace, db_url: str, meter: PgMeter) -> Results:
    configs = [Config("SQLite", 1, postgres=False)]
    configs += [Config(f"PostgreSQL x{r}", r, postgres=True) for r in args.replicas]
    workloads = [
        Workload(args.jobs, 1, args.n, args.top_k, args.text_words),
        Workload(args.small_jobs, args.small_repeats, args.n, args.top_k, args.text_words),
    ]
    if args.paced_latency_ms:
        workloads.append(
            Workload(
                args.small_jobs,
                args.paced_repeats,
                args.n,
                args.top_k,
                args.text_words,
                args.paced_latency_ms,
            )
        )
    results: Results = {}
    for round_index in range(args.rounds):
        ordered = configs if round_index % 2 == 0 else configs[::-1]
        for config in ordered:
            run_config(config, round_index, workloads, db_url, meter, results)
    print_throughput(configs, workloads, results)
    return results


def print_throughput(configs: list[Config], workloads: list[Workload], results: Results) -> None:
    print()
    print(
        "configuration   watcher  workload                verdicts/s (per round)   x SQLite  "
        "tiers p50 / p99 ms"
    )
    for index, workload in enumerate(workloads):
        base = statistics.mean(p.verdicts / p.wall_s for p in results[("SQLite", "within", index)])
        for config in configs:
            for placement in config.placements:
                phases = results[(config.name, placement, index)]
                rates = [p.verdicts / p.wall_s for p in phases]
                latencies = [ms for p in phases for ms in p.latencies_ms]
                shown = " / ".join(f"{r:.0f}" for r in rates)
                print(
                    f"{config.name:15s} {placement:7s}  {workload.label:22s}"
                    f"{statistics.mean(rates):6.0f} ({shown:15s})  "
                    f"{statistics.mean(rates) / base:6.2f}    "
                    f"{percentile(latencies, 0.5):7.1f} / {percentile(latencies, 0.99):7.1f}"
                )
    print_costs(configs, workloads[0], results)


def print_costs(configs: list[Config], workload: Workload, results: Results) -> None:
    print()
    print(f"per verdict, {workload.label}, all rounds together:")
    print(
        "configuration   watcher  CPU ms: server   PG  client  cores busy | xacts  stmts  "
        "notified  rows ins/upd/del  WAL B  WAL syncs  stored B  other-db xacts"
    )
    for config in configs:
        for placement in config.placements:
            phases = results[(config.name, placement, 0)]
            verdicts = sum(p.verdicts for p in phases)
            wall = sum(p.wall_s for p in phases)
            pg = [p.pg for p in phases if p.pg is not None]
            total = PgCounters.sum(pg) if pg else None
            cpu = (
                sum(p.server_cpu_s for p in phases),
                total.backend_cpu_s if total else 0.0,
                sum(p.client_cpu_s for p in phases),
            )
            line = (
                f"{config.name:15s} {placement:7s}  "
                f"{cpu[0] * 1000 / verdicts:13.2f} {cpu[1] * 1000 / verdicts:5.2f} "
                f"{cpu[2] * 1000 / verdicts:6.2f}  {sum(cpu) / wall:10.2f}"
            )
            if total is not None:
                per = {f.name: getattr(total, f.name) / verdicts for f in fields(total)}
                statements = f"{per['statements']:.2f}" if total.statements else "-"
                line += (
                    f" | {per['transactions']:5.2f}  "
                    f"{statements:>5s}  "
                    f"{sum(p.notified for p in phases) / verdicts:8.2f}  "
                    f"{per['rows_inserted']:5.2f}/{per['rows_updated']:4.2f}/"
                    f"{per['rows_deleted']:4.2f}  {per['wal_bytes']:5.0f}  "
                    f"{per['wal_syncs']:9.2f}  {per['stored_bytes']:8.0f}  "
                    f"{total.other_transactions:14d}"
                )
            print(line)
    for config in configs:
        for placement in config.placements:
            print_statements(config, placement, results[(config.name, placement, 0)])


# Statements shown per configuration, most frequent first, and the characters of each shown.
TOP_STATEMENTS = 14
STATEMENT_CHARS = 100


def print_statements(config: Config, placement: str, phases: list[Phase]) -> None:
    """pg_stat_statements per verdict, where the extension is loaded."""
    costs: dict[str, StatementCost] = {}
    for phase in phases:
        for text, cost in phase.statements.items():
            _merge(costs, text, cost)
    if not costs:
        return
    verdicts = sum(p.verdicts for p in phases)
    print()
    print(f"{config.name}, {placement}: calls per verdict, mean ms (lock waits in), WAL B per call")
    for text, cost in sorted(costs.items(), key=lambda item: -item[1].calls)[:TOP_STATEMENTS]:
        print(
            f"  {cost.calls / verdicts:6.3f}  {cost.total_ms / cost.calls:7.3f}  "
            f"{cost.wal_bytes / cost.calls:6.0f}  {text[:STATEMENT_CHARS]}"
        )


# -- failover -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Takeover:
    claimed_s: float  # kill -> the job's lease taken by another replica
    stored_s: float  # kill -> time stamp of the first verdict stored after the kill
    received_s: float  # kill -> the watcher receiving it
    gap_free: bool  # the watcher's sequence numbers ran 1, 2, 3, ... throughout


def _replica_pid(owner: str) -> int:
    """The PID in a replica id (server/jobs/replica.py: host-pid-random)."""
    return int(owner.rsplit("-", 2)[1])


async def _lease(conn: psycopg.AsyncConnection, job_id: str) -> tuple[str, int]:
    cursor = await conn.execute(
        "SELECT lease_owner, lease_epoch FROM jobs WHERE job_id = %s", (job_id,)
    )
    row = await cursor.fetchone()
    assert row is not None
    return row[0] or "", row[1]


async def _until_claimed(conn: psycopg.AsyncConnection, job_id: str, epoch: int) -> float:
    while True:
        owner, now_epoch = await _lease(conn, job_id)
        if owner and now_epoch != epoch:
            return time.time()
        await asyncio.sleep(LEASE_POLL_S)


async def one_takeover(
    runner: LocalServer,
    watcher_address: str,
    conn: psycopg.AsyncConnection,
    spec: rank_pb2.JobSpec,
    timeout_s: float,
) -> Takeover:
    async with (
        grpc.aio.insecure_channel(runner.address) as to_runner,
        grpc.aio.insecure_channel(watcher_address) as to_watcher,
    ):
        job = await rank_pb2_grpc.RankServiceStub(to_runner).CreateJob(
            rank_pb2.CreateJobRequest(spec=spec)
        )
        watch = rank_pb2_grpc.RankServiceStub(to_watcher)
        stream = watch.WatchJob(rank_pb2.WatchJobRequest(name=job.name), timeout=timeout_s)
        sequences: list[int] = []

        async def next_event() -> rank_pb2.JobEvent:
            event = await stream.read()
            # Not a JobEvent: grpc.aio.EOF, the stream's end.
            if not isinstance(event, rank_pb2.JobEvent) or event.WhichOneof("kind") in (
                "completed",
                "failed",
            ):
                raise RuntimeError(
                    "the job ended before another replica took it over: give it more work "
                    "(--failover-n) or a slower judge (--judge-latency-ms)"
                )
            sequences.append(event.sequence)
            return event

        while not (await next_event()).HasField("verdict"):
            pass
        job_id = job.name.partition("/")[2]
        owner, epoch = await _lease(conn, job_id)
        if _replica_pid(owner) != runner.pid:
            raise RuntimeError(f"{job.name} runs on {owner}, not on the replica that created it")
        # A crash falls anywhere in the lease's renewal cycle.
        await asyncio.sleep(random.uniform(0, RENEWAL_S))
        assert runner.pid is not None
        os.kill(runner.pid, signal.SIGKILL)
        killed = time.time()
        claimed = asyncio.create_task(_until_claimed(conn, job_id, epoch))
        try:
            while True:
                event = await next_event()
                stored = event.time.ToNanoseconds() / 1e9
                if event.HasField("verdict") and stored > killed:
                    received = time.time()
                    break
            claimed_at = await asyncio.wait_for(claimed, timeout_s)
        finally:
            claimed.cancel()
        await watch.CancelJob(rank_pb2.CancelJobRequest(name=job.name), timeout=timeout_s)
        stream.cancel()
    return Takeover(
        claimed_at - killed,
        stored - killed,
        received - killed,
        sequences == list(range(1, len(sequences) + 1)),
    )


async def failover(args: argparse.Namespace, db_url: str) -> list[Takeover]:
    url = create_schema(db_url, "failover")
    extra = ("--lease-seconds", f"{args.lease_seconds:g}")
    live = await asyncio.to_thread(start_servers, url, 3, extra)
    takeovers = []
    try:
        async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
            for trial in range(args.trials):
                spec = make_spec(
                    args.failover_n,
                    0,
                    trial,
                    args.text_words,
                    latency_ms=f"{args.judge_latency_ms:g}",
                )
                takeover = await one_takeover(
                    live[0], live[1].address, conn, spec, args.lease_seconds + 30
                )
                takeovers.append(takeover)
                print(
                    f"  trial {trial + 1:2d}: lease moved {takeover.claimed_s:5.2f} s, first new "
                    f"verdict stored {takeover.stored_s:5.2f} s, received "
                    f"{takeover.received_s:5.2f} s, gap-free {takeover.gap_free}",
                    flush=True,
                )
                dead = live.pop(0)
                dead.stop()
                live += await asyncio.to_thread(start_servers, url, 1, extra)
    finally:
        stop_servers(live)
    print_failover(args, takeovers)
    return takeovers


def print_failover(args: argparse.Namespace, takeovers: list[Takeover]) -> None:
    print()
    print(
        f"failover, {len(takeovers)} trials, --lease-seconds {args.lease_seconds:g}, judge "
        f"latency {args.judge_latency_ms:g} ms, 3 replicas (seconds from kill -9):"
    )
    for label, values in (
        ("lease moved to another replica", [t.claimed_s for t in takeovers]),
        ("first new verdict stored", [t.stored_s for t in takeovers]),
        ("first new verdict at the watcher", [t.received_s for t in takeovers]),
    ):
        print(
            f"  {label:34s} median {statistics.median(values):5.2f}  min {min(values):5.2f}  "
            f"max {max(values):5.2f}"
        )
    print(f"  watch streams gap-free: {sum(t.gap_free for t in takeovers)}/{len(takeovers)}")


# -- command line ---------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--part", choices=["all", "throughput", "failover"], default="all")
    parser.add_argument(
        "--postgres",
        default=os.environ.get("TIERANK_TEST_POSTGRES_URL", DEFAULT_POSTGRES),
        help="a PostgreSQL server's URL whose user may create databases",
    )
    parser.add_argument("--rounds", type=int, default=2, help="alternating rounds (default 2)")
    parser.add_argument(
        "--replicas",
        type=lambda text: [int(r) for r in text.split(",")],
        default=[1, 2, 3],
        help="PostgreSQL replica counts (default 1,2,3)",
    )
    parser.add_argument("--jobs", type=int, default=100, help="concurrent jobs (default 100)")
    parser.add_argument(
        "--small-jobs", type=int, default=10, help="the smaller workload's jobs (default 10)"
    )
    parser.add_argument(
        "--small-repeats", type=int, default=5, help="times the smaller workload runs (default 5)"
    )
    parser.add_argument(
        "--paced-latency-ms",
        type=float,
        default=300.0,
        help="then the smaller workload with this judge latency, starts spread (0: skip)",
    )
    parser.add_argument(
        "--paced-repeats", type=int, default=3, help="times the paced workload runs (default 3)"
    )
    parser.add_argument("--n", type=int, default=100, help="candidates per job (default 100)")
    parser.add_argument("--top-k", type=int, default=10, help="top-K to settle (default 10)")
    parser.add_argument("--text-words", type=int, default=60, help="words per candidate text")
    parser.add_argument("--trials", type=int, default=10, help="failover trials (default 10)")
    parser.add_argument(
        "--lease-seconds", type=float, default=8.0, help="failover: the replicas' lease (default 8)"
    )
    parser.add_argument(
        "--judge-latency-ms",
        type=float,
        default=200.0,
        help="failover: the oracle judge's latency per call (default 200)",
    )
    parser.add_argument(
        "--failover-n", type=int, default=100, help="failover: candidates, full order"
    )
    args = parser.parse_args(argv)
    with bench_database(args.postgres) as db_url:
        if args.part in ("all", "throughput"):
            meter = PgMeter(args.postgres, db_url)
            try:
                print(
                    "round trips counted as "
                    + (
                        "pg_stat_statements calls and pg_stat_database transactions"
                        if meter.has_statements
                        else "pg_stat_database transactions (pg_stat_statements not loaded)"
                    )
                    + ("" if meter.local else "; PostgreSQL is remote: no backend CPU")
                )
                throughput(args, db_url, meter)
            finally:
                meter.close()
        if args.part in ("all", "failover"):
            print()
            asyncio.run(failover(args, db_url))
    return 0


if __name__ == "__main__":
    sys.exit(main())
