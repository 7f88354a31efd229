"""What a large AddStudyInputs costs another tenant: its GetJob latency while one tenant's
big chunks are taken, beside the same calls on an idle server.

    python -m tierank.bench.study_inputs_fairness                      # 1,000,000 entries a chunk
    python -m tierank.bench.study_inputs_fairness --entries 150000     # a chunk of ~4 MiB
    python -m tierank.bench.study_inputs_fairness --db postgres [--postgres URL]

One server process (--auth keys, --max-message-mb 64: a chunk of a million run entries is
about 25 MiB, past the default 4 MiB) on SQLite in a fresh file or PostgreSQL in a fresh
schema, and two tenants made with the admin tool as an operator makes them. Tenant B has one
finished job and asks for it with GetJob back to back (5 ms apart), first for --seconds on the
idle server, then while tenant A sends --chunks AddStudyInputs, one after another, to a draft
study: each one system's run of --entries entries (1,000 documents a query). A's chunks are
serialized before they are timed and sent from another process at the lowest CPU priority
(nice 19), standing in for a client on another machine. Printed: A's calls (bytes, seconds
each, as A saw them) and B's GetJob p50, p95 and the slowest, idle and during A's calls.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import secrets
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from multiprocessing.synchronize import Event as ProcessEvent
from pathlib import Path
from urllib.parse import quote

import grpc
import psycopg
from psycopg import sql

from tierank.bench.service_bench import member_key, percentile
from tierank.bench.study_scale import DEFAULT_POSTGRES
from tierank.client import LocalServer
from tierank.v1 import rank_pb2, rank_pb2_grpc, study_pb2, study_pb2_grpc

MAX_MESSAGE_MB = 64
SERVER_ARGS = ("--auth", "keys", "--max-message-mb", str(MAX_MESSAGE_MB), "--log-level", "warning")
_LARGE = [
    ("grpc.max_send_message_length", MAX_MESSAGE_MB << 20),
    ("grpc.max_receive_message_length", MAX_MESSAGE_MB << 20),
]
_ADD_INPUTS = "/tierank.v1.StudyService/AddStudyInputs"
_DOCUMENTS_PER_QUERY = 1000


def _credentials(token: str) -> tuple[tuple[str, str], ...]:
    return (("authorization", f"Bearer {token}"),)


def _chunk(study: str, request_id: str, entries: int) -> bytes:
    request = study_pb2.AddStudyInputsRequest(study=study, request_id=request_id)
    run = request.runs.add(system="bm25")
    run.entries.extend(
        study_pb2.RunEntry(
            query_id=f"q{i // _DOCUMENTS_PER_QUERY}",
            doc_id=f"doc{i:08d}",
            score=float(_DOCUMENTS_PER_QUERY - i % _DOCUMENTS_PER_QUERY),
        )
        for i in range(entries)
    )
    return request.SerializeToString()


async def _uploads(
    address: str, token: str, chunks: list[bytes], started: ProcessEvent, report: str
) -> None:
    """A's chunks, one after another: each call's bytes and seconds, written to `report`."""
    calls = []
    async with grpc.aio.insecure_channel(address, options=_LARGE) as channel:
        add: grpc.aio.UnaryUnaryMultiCallable[bytes, study_pb2.AddStudyInputsResponse]
        add = channel.unary_unary(
            _ADD_INPUTS,
            request_serializer=None,  # sent as serialized beforehand
            response_deserializer=study_pb2.AddStudyInputsResponse.FromString,
        )
        started.set()
        for chunk in chunks:
            sent = time.perf_counter()
            answer = await add(chunk, metadata=_credentials(token), timeout=600)
            calls.append({"bytes": len(chunk), "seconds": time.perf_counter() - sent})
            assert answer.added
    Path(report).write_text(json.dumps(calls))


def _upload_process(
    address: str, token: str, study: str, args: argparse.Namespace, ready, started, report: str
) -> None:
    # At the lowest CPU priority: A's client stands in for one on another machine.
    os.nice(19)
    chunks = [_chunk(study, f"c{i}", args.entries) for i in range(args.chunks)]
    ready.set()
    asyncio.run(_uploads(address, token, chunks, started, report))


async def _probe(address: str, token: str, job: str, until: Iterator[bool]) -> list[float]:
    """B's GetJob latencies (ms), one call after another while `until` yields True."""
    latencies = []
    async with grpc.aio.insecure_channel(address) as channel:
        stub = rank_pb2_grpc.RankServiceStub(channel)
        request = rank_pb2.GetJobRequest(name=job)
        for _ in until:
            sent = time.perf_counter()
            await stub.GetJob(request, metadata=_credentials(token))
            latencies.append((time.perf_counter() - sent) * 1000)
            await asyncio.sleep(0.005)
    return latencies


def _for_seconds(seconds: float) -> Iterator[bool]:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        yield True


def _while_alive(process: multiprocessing.process.BaseProcess) -> Iterator[bool]:
    while process.is_alive():
        yield True


async def _setup(address: str, token_a: str, token_b: str) -> tuple[str, str]:
    """B's finished job and A's draft study."""
    async with grpc.aio.insecure_channel(address) as channel:
        rank = rank_pb2_grpc.RankServiceStub(channel)
        spec = rank_pb2.JobSpec(
            query="how do solar panels work",
            candidates=[
                rank_pb2.Candidate(id=f"c{i}", text=f"passage {i} about solar cells")
                for i in range(10)
            ],
            judges=[rank_pb2.JudgeSpec(provider="lexical")],
        )
        job = await rank.CreateJob(
            rank_pb2.CreateJobRequest(spec=spec), metadata=_credentials(token_b)
        )
        async for _ in rank.WatchJob(
            rank_pb2.WatchJobRequest(name=job.name), metadata=_credentials(token_b)
        ):
            pass
        judge = rank_pb2.JudgeSpec(provider="lexical")
        study = await study_pb2_grpc.StudyServiceStub(channel).CreateStudy(
            study_pb2.CreateStudyRequest(
                spec=study_pb2.StudySpec(depth=10, ranking=rank_pb2.JobSpec(judges=[judge]))
            ),
            metadata=_credentials(token_a),
        )
        return job.name, study.name


@contextmanager
def _database(kind: str, postgres: str) -> Iterator[str]:
    """The server's --db: a fresh SQLite file, or a fresh schema of `postgres` (dropped after)."""
    with tempfile.TemporaryDirectory() as tmp:
        if kind == "sqlite":
            yield str(Path(tmp) / "tierank.db")
            return
        tag = f"inputsbench_{secrets.token_hex(4)}"
        with psycopg.connect(postgres, autocommit=True) as admin:
            admin.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(tag)))
            separator = "&" if "?" in postgres else "?"
            url = f"{postgres}{separator}options={quote(f'-csearch_path={tag}')}"
            try:
                yield url
            finally:
                admin.execute(sql.SQL("DROP SCHEMA {} CASCADE").format(sql.Identifier(tag)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--entries", type=int, default=1_000_000, help="run entries a chunk")
    parser.add_argument("--chunks", type=int, default=3, help="A's chunks, one after another")
    parser.add_argument("--seconds", type=float, default=5.0, help="B's probe on the idle server")
    parser.add_argument("--db", choices=["sqlite", "postgres"], default="sqlite")
    parser.add_argument("--postgres", default=DEFAULT_POSTGRES, help="with --db postgres")
    args = parser.parse_args()
    with _database(args.db, args.postgres) as db:
        token_a, token_b = member_key(db, "team-a"), member_key(db, "team-b")
        with LocalServer(db=db, extra_args=SERVER_ARGS) as server:
            job, study = asyncio.run(_setup(server.address, token_a, token_b))
            alone = asyncio.run(_probe(server.address, token_b, job, _for_seconds(args.seconds)))
            context = multiprocessing.get_context("spawn")
            ready, started = context.Event(), context.Event()
            with tempfile.TemporaryDirectory() as tmp:
                report = str(Path(tmp) / "calls.json")
                upload = context.Process(
                    target=_upload_process,
                    args=(server.address, token_a, study, args, ready, started, report),
                )
                upload.start()
                if not ready.wait(600) or not started.wait(60):
                    raise SystemExit("tenant A's client did not start")
                loaded = asyncio.run(_probe(server.address, token_b, job, _while_alive(upload)))
                upload.join()
                calls = json.loads(Path(report).read_text())
    print(f"database {args.db}; load average {os.getloadavg()[0]:.1f}")
    for call in calls:
        print(f"A's AddStudyInputs: {call['bytes'] / 2**20:.1f} MiB in {call['seconds']:.2f} s")
    print(f"{'tenant B GetJob ms':<22}{'idle':>10}{'during A':>12}")
    for label, q in (("p50", 0.5), ("p95", 0.95), ("slowest", 1.0)):
        print(f"{label:<22}{percentile(alone, q):>10.1f}{percentile(loaded, q):>12.1f}")
    print(f"{'calls':<22}{len(alone):>10}{len(loaded):>12}")


if __name__ == "__main__":
    main()
