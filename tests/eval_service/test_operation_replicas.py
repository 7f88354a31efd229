"""Operations with two replicas (real server processes) on one PostgreSQL schema: one started
on A is watched and cancelled through B (its state is read from the database), and one whose
replica is killed ends as ABORTED through the other's sweep instead of staying RUNNING."""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager

import grpc
from google.rpc import code_pb2

from tierank.client import LocalServer
from tierank.v1 import eval_pb2, eval_pb2_grpc, rank_pb2

LEASE_S = 2.0  # the shortest --lease-seconds allows: a dead replica is found soonest
QUERIES = 8


@contextmanager
def two_replicas(db: str) -> Iterator[list[LocalServer]]:
    servers = [
        LocalServer(db=db, extra_args=("--lease-seconds", str(LEASE_S), "--log-level", "warning"))
        for _ in range(2)
    ]
    try:
        with ThreadPoolExecutor(2) as pool:
            list(pool.map(LocalServer.start, servers))
        yield servers
    finally:
        for server in servers:
            server.stop()


def evals(server: LocalServer) -> eval_pb2_grpc.EvalServiceStub:
    return eval_pb2_grpc.EvalServiceStub(grpc.insecure_channel(server.address))


def slow_qualification() -> eval_pb2.QualifyJudgeRequest:
    """QUERIES queries of four passages (grades 0-3), each batch in two shuffles, one call at a
    time by an oracle that takes 300 ms a call: about five seconds in all."""
    qrels, topics, passages = [], [], []
    for q in range(QUERIES):
        topics.append(f"q{q}\tquestion {q}")
        for d in range(4):
            qrels.append(f"q{q} 0 q{q}d{d} {d}")
            passages.append(json.dumps({"id": f"q{q}d{d}", "text": f"passage {q} {d}",
                                        "metadata": {"score": str(d)}}))  # fmt: skip

    def text(name: str, lines: list[str]) -> eval_pb2.TextFile:
        return eval_pb2.TextFile(name=name, content="\n".join(lines) + "\n")

    oracle = rank_pb2.JudgeSpec(
        provider="oracle", parameters=rank_pb2.JudgeParameters(options={"latency_ms": "300"})
    )
    return eval_pb2.QualifyJudgeRequest(
        judge=oracle,
        qrels=text("qrels", qrels),
        topics=text("topics", topics),
        passages=text("passages", passages),
        batch_size=4,
        batches_per_query=1,
        max_in_flight=1,
    )


def test_an_operation_is_watched_and_cancelled_through_another_replica(schema_url: str):
    with two_replicas(schema_url) as (a, b):
        started = evals(a).StartQualifyJudge(slow_qualification(), timeout=30)
        assert started.progress.planned_calls == 2 * QUERIES
        for seen in evals(b).WatchOperation(
            eval_pb2.WatchOperationRequest(name=started.name), timeout=30
        ):
            if seen.progress.done_calls >= 2:
                break
        assert seen.state == rank_pb2.JOB_STATE_RUNNING
        cancelled = evals(b).CancelOperation(
            eval_pb2.CancelOperationRequest(name=started.name), timeout=30
        )
        assert cancelled.state == rank_pb2.JOB_STATE_CANCELLED
        assert 2 <= cancelled.progress.done_calls < 2 * QUERIES
        assert evals(a).GetOperation(
            eval_pb2.GetOperationRequest(name=started.name), timeout=30
        ) == evals(b).GetOperation(eval_pb2.GetOperationRequest(name=started.name), timeout=30)


def test_a_killed_replicas_operation_is_ended_by_the_other(schema_url: str):
    with two_replicas(schema_url) as (a, b):
        started = evals(a).StartQualifyJudge(slow_qualification(), timeout=30)
        assert a.pid is not None
        os.kill(a.pid, signal.SIGKILL)
        give_up = time.monotonic() + 30
        while True:
            seen = evals(b).GetOperation(
                eval_pb2.GetOperationRequest(name=started.name), timeout=30
            )
            if seen.state != rank_pb2.JOB_STATE_RUNNING or time.monotonic() > give_up:
                break
            time.sleep(0.2)
        assert seen.state == rank_pb2.JOB_STATE_FAILED
        assert seen.error.code == code_pb2.ABORTED
        assert "stopped before it finished" in seen.error.message
