"""Crash loop: a server killed with SIGKILL at random moments and restarted each time still
finishes every job, never buys an answer twice, and its watchers see every event once."""

from __future__ import annotations

import json
import os
import random
import signal
import sys
import threading
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import grpc
import pytest

# The fake providers live with the provider and end-to-end tests.
sys.path.insert(0, str(Path(__file__).parents[1] / "providers"))
sys.path.insert(0, str(Path(__file__).parents[1] / "e2e"))

from fakes import Recorded, Step
from graded_fakes import (
    FAKE_MODEL_PRICES,
    PROVIDER_ENV,
    FakeLLMThread,
    GradedResponder,
    best_first,
    graded_pool,
    judges_config,
)

from tierank.client import LocalServer, candidate, job_spec, judge
from tierank.v1 import rank_pb2, rank_pb2_grpc

FLAVOR = "openai"
KILLS = 4
# An answer is stored this long after the fake sends it, at most, on a busy machine (0.5 s was
# passed once in a clean clone's CI run, three test workers on two cores, right after a
# restart). Answers wait for the rest of their plan longer than this (up to the jitter of the
# fake's delays, 1.2 s), so a server that stored answers only with their whole plan is still
# caught re-buying them.
DELIVERY_S = 0.8


@dataclass
class _Asked:
    prompt: str
    at: float  # monotonic, when the request arrived
    answered_at: float  # when the fake sends the answer


@dataclass
class _CountingResponder:
    """Ranks by grade after a random delay, and records when each answer leaves."""

    graded: GradedResponder
    asked: list[_Asked] = field(default_factory=list)

    def __call__(self, request: Recorded) -> Step:
        step = self.graded(request)
        delay = getattr(step, "seconds", 0.0)
        self.asked.append(_Asked(request.prompt, request.at, request.at + delay))
        return step


class _Watcher(threading.Thread):
    """A client that watches one job and reconnects after its last event whenever the
    server goes away, as the README tells clients to."""

    def __init__(self, name: str, server: LocalServer) -> None:
        super().__init__(daemon=True)
        self.job = name
        self.server = server
        self.events: list[rank_pb2.JobEvent] = []
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            after = self.events[-1].sequence if self.events else 0
            try:
                with grpc.insecure_channel(self.server.address) as channel:
                    stub = rank_pb2_grpc.RankServiceStub(channel)
                    request = rank_pb2.WatchJobRequest(name=self.job, after_sequence=after)
                    for event in stub.WatchJob(request, timeout=5):
                        self.events.append(event)
                        if event.WhichOneof("kind") in ("completed", "failed"):
                            return
            except grpc.RpcError:
                time.sleep(0.05)


def test_kill_9_at_random_moments_loses_nothing_and_buys_nothing_twice(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    for name in PROVIDER_ENV:
        monkeypatch.delenv(name, raising=False)
    rng = random.Random(13)
    with FakeLLMThread() as fake:
        responder = _CountingResponder(GradedResponder(name=FLAVOR, latency_s=0.02, jitter_s=1.2))
        fake.respond_with(FLAVOR, responder)
        config = tmp_path / "judges.json"
        config.write_text(json.dumps(judges_config(fake, prices=FAKE_MODEL_PRICES)))
        server = LocalServer(
            db=tmp_path / "tierank.db",
            extra_args=("--log-level", "warning", "--judges-config", str(config)),
        )
        pools = [graded_pool(20, seed=seed, words=8) for seed in range(3)]
        specs = [
            job_spec(
                "which passage has the highest grade",
                [candidate(c.id, c.text) for c in pool],
                judges=[judge(f"{FLAVOR}:fake-gpt")],
                rubric="a passage is better the higher its grade",
                batch_size=4,
                max_in_flight=6,
            )
            for pool in pools
        ]
        kills: list[float] = []
        watchers: list[_Watcher] = []
        try:
            server.start()
            with grpc.insecure_channel(server.address) as channel:
                stub = rank_pb2_grpc.RankServiceStub(channel)
                names = [
                    stub.CreateJob(rank_pb2.CreateJobRequest(spec=s, request_id=f"job{i}")).name
                    for i, s in enumerate(specs)
                ]
            watchers = [_Watcher(name, server) for name in names]
            for watcher in watchers:
                watcher.start()
            for _ in range(KILLS):
                time.sleep(rng.uniform(0.25, 1.0))
                assert server.pid is not None
                kills.append(time.monotonic())
                os.kill(server.pid, signal.SIGKILL)
                server.stop()
                server.start()
            # The kills are over, and with them what the long delays are for (answers owed at a
            # kill): the rest of the jobs may be answered promptly.
            responder.graded.jitter_s = 0.0
            for watcher in watchers:
                watcher.join(timeout=30)
            assert all(not w.is_alive() for w in watchers), "every job completes"
            with grpc.insecure_channel(server.address) as channel:
                stub = rank_pb2_grpc.RankServiceStub(channel)
                stored = [
                    list(stub.WatchJob(rank_pb2.WatchJobRequest(name=n), timeout=10)) for n in names
                ]
        finally:
            for watcher in watchers:
                watcher.stop.set()
            server.stop()

    for watcher, history, pool in zip(watchers, stored, pools, strict=True):
        events = watcher.events
        assert [e.sequence for e in events] == list(range(1, len(events) + 1)), "no gap, once"
        assert events == history, "what the watcher saw is what was stored"
        assert events[-1].completed.reason == rank_pb2.COMPLETION_REASON_SETTLED
        order = [c for tier in events[-1].completed.tiers for c in tier.candidate_ids]
        assert order == best_first(pool)
        call_ids = [e.verdict.call_id for e in events if e.HasField("verdict")]
        assert len(call_ids) == len(set(call_ids))

    by_prompt: dict[str, list[_Asked]] = defaultdict(list)
    for asked in responder.asked:
        by_prompt[asked.prompt].append(asked)
    last_asked = max(a.at for a in responder.asked)
    assert sum(k < last_asked for k in kills) >= KILLS - 2, "the kills fell while jobs ran"
    for times in by_prompt.values():
        # A prompt is asked again only when a kill came before its answer could be stored.
        for earlier in sorted(times, key=lambda a: a.at)[:-1]:
            assert any(earlier.at < k < earlier.answered_at + DELIVERY_S for k in kills), (
                "an answer received before a kill was bought again"
            )
