"""Fairness between tenants: what one tenant at its limits costs another's GetJob.

    python -m tierank.bench.tenant_fairness                   # 400 jobs, 5x200 streams, 1 s judges
    python -m tierank.bench.tenant_fairness --latency-ms 200  # judges 5x as fast: a heavier A
    python -m tierank.bench.tenant_fairness --jobs 50 --watchers-per-job 50 --seconds 5
    python -m tierank.bench.tenant_fairness --auth none       # two clients, no keys, one tenant

One server (its own process, SQLite, --auth keys) and two tenants created without limits of
their own, so both have the server's default limits. Tenant B has one finished job and asks for
it with GetJob back to back, first alone, then while tenant A is at its limits: A asks for
`--jobs` long-running jobs (those past its concurrent-jobs limit are refused) and opens
`--watchers-per-job` watch streams on each of its first `--watched-jobs` jobs (those past its
watcher limit are refused). A's clients run in another process at the lowest CPU priority
(nice 19), standing in for clients on other machines: their own work is neither B's client's
nor the server's. Printed: B's GetJob p50 and p95 alone and under A's load, side by side, and the
ratios loaded/alone; what A was refused; and the events A's watchers received (A is served too).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import statistics
import tempfile
import time
from multiprocessing.synchronize import Event as ProcessEvent
from pathlib import Path

import grpc

from tierank.bench.service_bench import member_key, percentile
from tierank.client import LocalServer
from tierank.v1 import rank_pb2, rank_pb2_grpc


def _credentials(token: str) -> tuple[tuple[str, str], ...]:
    return (("authorization", f"Bearer {token}"),) if token else ()


def _spec(candidates: int, latency_ms: str, seed: int) -> rank_pb2.JobSpec:
    judge = rank_pb2.JudgeSpec(
        provider="oracle",
        parameters=rank_pb2.JudgeParameters(options={"noise": "0.3", "latency_ms": latency_ms}),
    )
    return rank_pb2.JobSpec(
        query="how do solar panels work",
        rubric="relevant if it explains the mechanism",
        candidates=[
            rank_pb2.Candidate(
                id=f"c{i:03d}", text=f"passage {i} about solar cells", metadata={"score": str(-i)}
            )
            for i in range(candidates)
        ],
        judges=[judge],
        top_k=0,
        max_in_flight=4,
        seed=seed,
    )


async def _probe(address: str, token: str, name: str, seconds: float) -> list[float]:
    """B's GetJob latencies (ms), one call after another for `seconds`."""
    metadata = _credentials(token)
    latencies = []
    async with grpc.aio.insecure_channel(address) as channel:
        stub = rank_pb2_grpc.RankServiceStub(channel)
        request = rank_pb2.GetJobRequest(name=name)
        until = time.monotonic() + seconds
        while time.monotonic() < until:
            sent = time.perf_counter()
            await stub.GetJob(request, metadata=metadata)
            latencies.append((time.perf_counter() - sent) * 1000)
            await asyncio.sleep(0.005)
    return latencies


async def _load(
    address: str, token: str, args: argparse.Namespace, ready: ProcessEvent, report: str
) -> None:
    """Tenant A at its limits until cancelled: jobs, and watch streams on its first jobs."""
    metadata = _credentials(token)
    tally = {"jobs": 0, "jobs_refused": 0, "watchers": 0, "watchers_refused": 0, "events": 0}
    async with grpc.aio.insecure_channel(address) as channel:
        stub = rank_pb2_grpc.RankServiceStub(channel)

        async def create(seed: int) -> str | None:
            spec = _spec(args.candidates, args.latency_ms, seed)
            try:
                job = await stub.CreateJob(rank_pb2.CreateJobRequest(spec=spec), metadata=metadata)
            except grpc.aio.AioRpcError as error:
                assert error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED, error
                tally["jobs_refused"] += 1
                return None
            tally["jobs"] += 1
            return job.name

        async def watch(name: str) -> None:
            try:
                call = stub.WatchJob(rank_pb2.WatchJobRequest(name=name), metadata=metadata)
                async for _ in call:
                    tally["events"] += 1
            except grpc.aio.AioRpcError as error:
                if error.code() != grpc.StatusCode.RESOURCE_EXHAUSTED:
                    raise
                tally["watchers_refused"] += 1

        watchers: list[asyncio.Task[None]] = []
        # The watched jobs first, watched at once, so that they are watched while they run.
        for seed in range(args.jobs):
            name = await create(seed)
            if name is not None and seed < args.watched_jobs:
                watchers += [asyncio.create_task(watch(name)) for _ in range(args.watchers_per_job)]
        await asyncio.sleep(2.0)  # streams opened (or refused)
        tally["watchers"] = len(watchers) - tally["watchers_refused"]
        ready.set()
        await asyncio.sleep(args.seconds + 2.0)
        Path(report).write_text(json.dumps(tally))
        for task in watchers:
            task.cancel()
        await asyncio.gather(*watchers, return_exceptions=True)


def _load_process(
    address: str, token: str, args: argparse.Namespace, ready: ProcessEvent, report: str
) -> None:
    # At the lowest CPU priority: A's clients stand in for clients on other machines, and on a
    # small host they would otherwise take the server's CPU, which is not what is measured.
    os.nice(19)
    asyncio.run(_load(address, token, args, ready, report))


async def _finished_job(address: str, token: str) -> str:
    metadata = _credentials(token)
    async with grpc.aio.insecure_channel(address) as channel:
        stub = rank_pb2_grpc.RankServiceStub(channel)
        job = await stub.CreateJob(
            rank_pb2.CreateJobRequest(spec=_spec(10, "0", 1)), metadata=metadata
        )
        async for _ in stub.WatchJob(rank_pb2.WatchJobRequest(name=job.name), metadata=metadata):
            pass
        return job.name


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=400, help="jobs tenant A asks for")
    parser.add_argument("--watched-jobs", type=int, default=5, help="A's jobs it watches")
    parser.add_argument("--watchers-per-job", type=int, default=200, help="streams per job")
    parser.add_argument("--candidates", type=int, default=200, help="per job of A's")
    parser.add_argument("--latency-ms", default="1000", help="A's judges' latency per call")
    parser.add_argument("--seconds", type=float, default=8.0, help="each probe's length")
    parser.add_argument(
        "--auth",
        choices=["keys", "none"],
        default="keys",
        help="keys: A and B are two tenants; none: two clients of the one tenant of a server "
        "without keys (A's jobs are then limited only by the tenant's defaults)",
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "tierank.db"
        if args.auth == "keys":
            token_a, token_b = member_key(db, "team-a"), member_key(db, "team-b")
        else:  # one tenant, two clients: what one client's jobs cost another's calls
            token_a = token_b = ""
        extra = ("--auth", args.auth, "--log-level", "warning")
        with LocalServer(db=db, extra_args=extra) as server:
            name_b = asyncio.run(_finished_job(server.address, token_b))
            alone = asyncio.run(_probe(server.address, token_b, name_b, args.seconds))
            ready = multiprocessing.get_context("spawn").Event()
            report = str(Path(tmp) / "load.json")
            load = multiprocessing.get_context("spawn").Process(
                target=_load_process, args=(server.address, token_a, args, ready, report)
            )
            load.start()
            if not ready.wait(600):
                raise SystemExit("tenant A's load did not start")
            loaded = asyncio.run(_probe(server.address, token_b, name_b, args.seconds))
            load.join(120)
            tally = json.loads(Path(report).read_text())
    print(
        f"tenant A: {tally['jobs']} jobs running ({tally['jobs_refused']} refused), "
        f"{tally['watchers']} watch streams ({tally['watchers_refused']} refused), "
        f"{tally['events']} events delivered"
    )
    print(f"{'tenant B GetJob':<22}{'alone':>10}{'A at limits':>14}{'ratio':>8}")
    for label, q in (("p50 ms", 0.5), ("p95 ms", 0.95)):
        a, b = percentile(alone, q), percentile(loaded, q)
        print(f"{label:<22}{a:>10.2f}{b:>14.2f}{b / a:>8.1f}")
    print(f"{'calls':<22}{len(alone):>10}{len(loaded):>14}")
    print(f"mean ms alone {statistics.fmean(alone):.2f}, loaded {statistics.fmean(loaded):.2f}")


if __name__ == "__main__":
    main()
