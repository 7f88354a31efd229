"""Service benchmark: many concurrent jobs through real gRPC with SQLite durability.

    python -m tierank.bench.service_bench                 # 100 jobs of N=100, top-10, k=10
    python -m tierank.bench.service_bench --full-order 1000   # one job, N=1000, full ordering
    python -m tierank.bench.service_bench --compare-auth      # --auth none vs keys, one run
    python -m tierank.bench.service_bench --compare-tracing   # traces off vs on, one run

(Several replicas on PostgreSQL beside SQLite, and failover: bench/replicas_bench.py.)

The server runs in its own process (as in production); this process is the client. Every job
uses the `oracle` judge with zero latency and has one watcher. Figures printed:
- verdicts per second over the whole run (stored verdicts / wall time);
- latency from a tiers update being written to a watcher receiving it (event time stamp to
  receipt, same host clock), p50 and p99;
- the server's resident memory: idle, peak, and the peak growth per active job minus the job's
  candidate texts.

With --compare-auth the same workload runs against a server with --auth none and one with
--auth keys (a member key on every call), alternating ROUNDS times, and the ratios keys/none of
verdicts per second, tiers latency p99 and unary GetJob latency p50/p99 are printed.
--compare-tracing does the same with tracing off and on (--otlp-endpoint at a collector on
loopback that takes every span: tests/observability/collector.py, from a checkout), on/off.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import grpc

from tierank.client import LocalServer
from tierank.v1 import rank_pb2, rank_pb2_grpc

WORDS = [
    "solar",
    "panel",
    "cell",
    "photon",
    "silicon",
    "current",
    "voltage",
    "inverter",
    "grid",
    "battery",
    "light",
    "energy",
]


def _rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS")


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def make_spec(
    n: int, top_k: int, seed: int, text_words: int, **judge_options: str
) -> rank_pb2.JobSpec:
    """N candidates for the `oracle` judge (noise 0.5, more options from `judge_options`)."""
    candidates = [
        rank_pb2.Candidate(
            id=f"d{i}",
            text=" ".join(WORDS[(i + j) % len(WORDS)] for j in range(text_words)),
            metadata={"score": str((i * 7919 + seed) % 1000 / 100)},
        )
        for i in range(n)
    ]
    return rank_pb2.JobSpec(
        query="how do solar panels work",
        candidates=candidates,
        judges=[
            rank_pb2.JudgeSpec(
                provider="oracle",
                parameters=rank_pb2.JudgeParameters(options={"noise": "0.5", **judge_options}),
            )
        ],
        batch_size=10,
        top_k=top_k,
        seed=seed,
    )


@dataclass
class Tally:
    verdicts: int = 0
    latencies_ms: list[float] = field(default_factory=list)


Metadata = tuple[tuple[str, str], ...]


async def run_job(
    stub: rank_pb2_grpc.RankServiceAsyncStub,
    spec: rank_pb2.JobSpec,
    tally: Tally,
    md: Metadata = (),
    watch_stub: rank_pb2_grpc.RankServiceAsyncStub | None = None,
) -> None:
    """Create the job through `stub` and watch it to its end through `watch_stub` (another
    replica's, say; default `stub`)."""
    job = await stub.CreateJob(rank_pb2.CreateJobRequest(spec=spec), metadata=md)
    watcher = watch_stub or stub
    async for event in watcher.WatchJob(rank_pb2.WatchJobRequest(name=job.name), metadata=md):
        kind = event.WhichOneof("kind")
        if kind == "verdict":
            tally.verdicts += 1
        elif kind == "tiers_updated":
            written = event.time.ToNanoseconds() / 1e9
            tally.latencies_ms.append((time.time() - written) * 1000)
        elif kind in ("completed", "failed"):
            return


async def sample_memory(pid: int, stop: asyncio.Event, peak: list[int]) -> None:
    while not stop.is_set():
        peak[0] = max(peak[0], _rss_bytes(pid))
        await asyncio.sleep(0.05)


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def measure(address: str, pid: int, jobs: int, n: int, top_k: int, text_words: int) -> None:
    specs = [make_spec(n, top_k, seed, text_words) for seed in range(jobs)]
    text_bytes = sum(len(c.text.encode()) for c in specs[0].candidates)
    idle = _rss_bytes(pid)
    peak = [idle]
    stop = asyncio.Event()
    tally = Tally()
    async with grpc.aio.insecure_channel(
        address, options=[("grpc.max_receive_message_length", 256 * 1024 * 1024)]
    ) as channel:
        stub = rank_pb2_grpc.RankServiceStub(channel)
        sampler = asyncio.create_task(sample_memory(pid, stop, peak))
        cpu_before = cpu_seconds(pid)
        started = time.perf_counter()
        await asyncio.gather(*(run_job(stub, spec, tally) for spec in specs))
        wall = time.perf_counter() - started
        server_cpu = cpu_seconds(pid) - cpu_before
        stop.set()
        await sampler
    per_job = (peak[0] - idle) / jobs
    print(f"jobs {jobs} x N={n}, top_k={top_k or 'full'}, k=10, oracle judge, 1 watcher each")
    print(f"wall time                 {wall:8.2f} s")
    print(f"verdicts stored           {tally.verdicts:8d}")
    print(f"verdicts per second       {tally.verdicts / wall:8.0f}")
    print(f"server CPU                {server_cpu:8.2f} s ({server_cpu / wall:.0%} of one core)")
    print(f"verdicts per server CPU-s {tally.verdicts / server_cpu:8.0f}")
    if tally.latencies_ms:
        print(f"tiers write->watcher p50  {percentile(tally.latencies_ms, 0.50):8.1f} ms")
        print(f"tiers write->watcher p99  {percentile(tally.latencies_ms, 0.99):8.1f} ms")
    print(f"server RSS idle / peak    {idle / 2**20:8.1f} / {peak[0] / 2**20:.1f} MiB")
    print(f"peak growth per job       {per_job / 2**20:8.3f} MiB")
    print(f"candidate texts per job   {text_bytes / 2**20:8.3f} MiB")
    print(f"growth per job less texts {(per_job - text_bytes) / 2**20:8.3f} MiB")


@dataclass
class AuthRound:
    verdicts_per_s: float
    tiers_p99_ms: float
    get_job_ms: list[float]
    # Server CPU per verdict: what a mode costs, less sensitive than wall time to a busy host.
    cpu_ms_per_verdict: float


async def auth_round(
    address: str,
    pid: int,
    md: Metadata,
    jobs: int,
    n: int,
    top_k: int,
    text_words: int,
    probes: int,
) -> AuthRound:
    """The job workload, then `probes` sequential GetJob calls (auth is paid per call)."""
    specs = [make_spec(n, top_k, seed, text_words) for seed in range(jobs)]
    tally = Tally()
    async with grpc.aio.insecure_channel(address) as channel:
        stub = rank_pb2_grpc.RankServiceStub(channel)
        cpu_before = cpu_seconds(pid)
        started = time.perf_counter()
        await asyncio.gather(*(run_job(stub, spec, tally, md) for spec in specs))
        wall = time.perf_counter() - started
        cpu_ms_per_verdict = (cpu_seconds(pid) - cpu_before) * 1000 / tally.verdicts
        listed = await stub.ListJobs(rank_pb2.ListJobsRequest(page_size=1), metadata=md)
        request = rank_pb2.GetJobRequest(name=listed.jobs[0].name)
        get_job_ms = []
        for _ in range(probes):
            sent = time.perf_counter()
            await stub.GetJob(request, metadata=md)
            get_job_ms.append((time.perf_counter() - sent) * 1000)
    return AuthRound(
        tally.verdicts / wall,
        percentile(tally.latencies_ms, 0.99),
        get_job_ms,
        cpu_ms_per_verdict,
    )


def member_key(db: Path | str, tenant: str = "bench") -> str:
    """A member key made on the database as an operator makes the first one (its tenant first,
    with no limits named, so the server's defaults: keys are made only for tenants that
    exist)."""
    answers = [
        subprocess.run(
            [sys.executable, "-m", "tierank.server.admin_tool", method, "--db", str(db)],
            input=json.dumps(request),
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        for method, request in (
            ("SetTenant", {"tenant": tenant}),
            ("CreateApiKey", {"tenant": tenant, "role": "ROLE_MEMBER"}),
        )
    ]
    return json.loads(answers[-1])["secret"]


def compare_auth(args: argparse.Namespace, extra: tuple[str, ...]) -> None:
    results: dict[str, list[AuthRound]] = {"none": [], "keys": []}
    with tempfile.TemporaryDirectory() as tmp:
        for round_index in range(args.rounds):
            for mode in ("none", "keys"):
                db = Path(tmp) / f"{mode}-{round_index}.db"
                md: Metadata = ()
                if mode == "keys":
                    md = (("authorization", f"Bearer {member_key(db)}"),)
                with LocalServer(db=db, extra_args=(*extra, "--auth", mode)) as server:
                    results[mode].append(_round(args, server, md))
    print(
        f"--auth none vs keys: {args.rounds} alternating rounds of {args.jobs} jobs x "
        f"N={args.n}, then {args.probes} sequential GetJob calls"
    )
    _compare(results, "none", "keys")


def _round(args: argparse.Namespace, server: LocalServer, md: Metadata = ()) -> AuthRound:
    assert server.pid is not None
    return asyncio.run(
        auth_round(
            server.address,
            server.pid,
            md,
            args.jobs,
            args.n,
            args.top_k,
            args.text_words,
            args.probes,
        )
    )


def compare_tracing(args: argparse.Namespace, extra: tuple[str, ...]) -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "observability"))
    from collector import TraceCollector  # type: ignore[import-not-found]  # tests/, on the path

    results: dict[str, list[AuthRound]] = {"off": [], "on": []}
    with tempfile.TemporaryDirectory() as tmp, TraceCollector() as collector:
        for round_index in range(args.rounds):
            for mode in ("off", "on"):
                db = Path(tmp) / f"{mode}-{round_index}.db"
                tracing = ("--otlp-endpoint", collector.endpoint) if mode == "on" else ()
                with LocalServer(db=db, extra_args=(*extra, *tracing)) as server:
                    results[mode].append(_round(args, server))
        exported = len(collector.spans)
    print(
        f"tracing off vs on: {args.rounds} alternating rounds of {args.jobs} jobs x "
        f"N={args.n}, then {args.probes} sequential GetJob calls; {exported} spans exported"
    )
    _compare(results, "off", "on")


def _compare(results: dict[str, list[AuthRound]], base: str, other: str) -> None:
    """The medians of each mode's rounds, and `other`'s as a ratio of `base`'s."""
    summary = {}
    for mode, rounds in results.items():
        calls = [ms for r in rounds for ms in r.get_job_ms]
        summary[mode] = (
            statistics.median(r.verdicts_per_s for r in rounds),
            statistics.median(r.tiers_p99_ms for r in rounds),
            percentile(calls, 0.50),
            percentile(calls, 0.99),
            statistics.median(r.cpu_ms_per_verdict for r in rounds),
        )
        v, t99, g50, g99, cpu = summary[mode]
        print(
            f"{mode:5s} verdicts/s {v:8.0f}   tiers p99 {t99:7.1f} ms   "
            f"GetJob p50 {g50:6.2f} ms  p99 {g99:6.2f} ms   server CPU/verdict {cpu:6.3f} ms"
        )
    (v0, t0, g0, h0, c0), (v1, t1, g1, h1, c1) = summary[base], summary[other]
    print(
        f"{other}/{base} verdicts/s {v1 / v0:.3f}   tiers p99 {t1 / t0:.3f}   "
        f"GetJob p50 {g1 / g0:.3f}  p99 {h1 / h0:.3f}   server CPU/verdict {c1 / c0:.3f}"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--jobs", type=int, default=100, help="concurrent jobs (default 100)")
    parser.add_argument("--n", type=int, default=100, help="candidates per job (default 100)")
    parser.add_argument("--top-k", type=int, default=10, help="top-K to settle (default 10)")
    parser.add_argument("--text-words", type=int, default=60, help="words per candidate text")
    parser.add_argument(
        "--full-order", type=int, metavar="N", help="instead: one job of N candidates, full order"
    )
    parser.add_argument(
        "--synchronous", choices=["FULL", "NORMAL"], default="FULL", help="SQLite synchronous"
    )
    parser.add_argument(
        "--compare-auth",
        action="store_true",
        help="instead: the workload with --auth none and with --auth keys, as ratios",
    )
    parser.add_argument(
        "--compare-tracing",
        action="store_true",
        help="instead: the workload with tracing off and on, as ratios",
    )
    parser.add_argument(
        "--rounds", type=int, default=3, help="--compare-*: alternating rounds (default 3)"
    )
    parser.add_argument(
        "--probes", type=int, default=2000, help="--compare-*: GetJob calls per round"
    )
    args = parser.parse_args(argv)
    jobs, n, top_k = (1, args.full_order, 0) if args.full_order else (args.jobs, args.n, args.top_k)
    extra = ("--sqlite-synchronous", args.synchronous, "--log-level", "warning")
    if args.compare_auth:
        compare_auth(args, extra)
        return 0
    if args.compare_tracing:
        compare_tracing(args, extra)
        return 0
    with (
        tempfile.TemporaryDirectory() as tmp,
        LocalServer(
            db=Path(tmp) / "bench.db", extra_args=(*extra, "--max-message-mb", "256")
        ) as server,
    ):
        assert server.pid is not None
        asyncio.run(measure(server.address, server.pid, jobs, n, top_k, args.text_words))
    return 0


if __name__ == "__main__":
    sys.exit(main())
