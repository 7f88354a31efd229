"""Three replicas (real server processes) on one PostgreSQL schema: failover after kill -9,
hand-over on SIGTERM, cancel and idempotent creation through any replica, a replica paused past
its lease that is fenced when it wakes, and a database restart under load."""

from __future__ import annotations

import json
import os
import shutil
import signal
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path

import grpc
import psycopg
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "e2e"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from graded_fakes import (
    FAKE_MODEL_PRICES,
    MODELS,
    PROVIDER_ENV,
    FakeLLMThread,
    GradedResponder,
    graded_pool,
    judges_config,
    presented_ids,
)
from postgres_cluster import (
    fresh_schema,
    schema_url_for,
    start_cluster,
    stop_cluster,
    throwaway_cluster,
)

from tierank.client import LocalServer, candidate, job_spec, judge
from tierank.v1 import rank_pb2, rank_pb2_grpc

pytestmark = pytest.mark.long_module

LEASE_S = 2.0  # the shortest --lease-seconds allows: failovers come soonest
# Judges slow enough that a job is still running when a replica is stopped.
LATENCY_MS = "250"


@contextmanager
def replicas(db: str, count: int = 3, *extra: str, env=None) -> Iterator[list[LocalServer]]:
    servers = [
        LocalServer(
            db=db,
            extra_args=("--lease-seconds", str(LEASE_S), "--log-level", "info", *extra),
            env=env,
        )
        for _ in range(count)
    ]
    try:
        with ThreadPoolExecutor(count) as pool:
            list(pool.map(LocalServer.start, servers))
        yield servers
    finally:
        for server in servers:
            server.stop()


def stub(server: LocalServer) -> rank_pb2_grpc.RankServiceStub:
    return rank_pb2_grpc.RankServiceStub(grpc.insecure_channel(server.address))


class Watcher:
    """Every event of a job from one replica, with the moment it arrived (a thread)."""

    def __init__(self, server: LocalServer, name: str) -> None:
        self.events: list[tuple[float, rank_pb2.JobEvent]] = []
        self.error: grpc.RpcError | None = None
        self._request = rank_pb2.WatchJobRequest(name=name)
        self._stub = stub(server)
        self._thread = threading.Thread(target=self._watch, daemon=True)
        self._thread.start()

    def _watch(self) -> None:
        try:
            for event in self._stub.WatchJob(self._request, timeout=90):
                self.events.append((time.monotonic(), event))
        except grpc.RpcError as error:  # a stream cut by the end of the test, or a failure
            self.error = error

    def wait_for_verdicts(self, count: int, timeout: float = 30) -> None:
        give_up = time.monotonic() + timeout
        while sum(e.HasField("verdict") for _, e in self.events) < count:
            assert time.monotonic() < give_up, "no verdicts"
            time.sleep(0.02)

    def finished(self, timeout: float = 90) -> list[rank_pb2.JobEvent]:
        self._thread.join(timeout)
        assert not self._thread.is_alive() and self.error is None, self.error
        return [e for _, e in self.events]

    def first_verdict_after(self, moment: float) -> float:
        return min(at for at, e in self.events if e.HasField("verdict") and at > moment)


def assert_whole(events: list[rank_pb2.JobEvent]) -> None:
    """In order, gap-free, ending complete, and no call recorded twice."""
    assert [e.sequence for e in events] == list(range(1, len(events) + 1))
    assert events[-1].HasField("completed"), events[-1]
    calls = Counter(e.verdict.call_id for e in events if e.HasField("verdict"))
    assert calls and max(calls.values()) == 1


def oracle_spec(n: int, **fields: object) -> rank_pb2.JobSpec:
    return job_spec(
        "how do photovoltaic solar panels work",
        [candidate(f"c{i:03d}", f"passage {i}", metadata={"score": str(n - i)}) for i in range(n)],
        judges=[judge("oracle", options={"latency_ms": LATENCY_MS})],
        batch_size=4,
        **fields,
    )


def _fake_judges(fake: FakeLLMThread, tmp_path: Path) -> Path:
    """A judges config that sends the openai provider to `fake`."""
    config = tmp_path / "judges.json"
    config.write_text(json.dumps(judges_config(fake, prices=FAKE_MODEL_PRICES)))
    return config


def _graded_openai_spec(**fields: object) -> rank_pb2.JobSpec:
    """24 graded passages for the fake openai judge, which ranks them by their hidden grade."""
    return job_spec(
        "which passage has the highest grade",
        [candidate(c.id, c.text) for c in graded_pool(24)],
        judges=[judge(f"openai:{MODELS['openai']}")],
        rubric="a passage is better the higher its grade",
        batch_size=4,
        **fields,
    )


# -- failover -------------------------------------------------------------------------------------


def test_kill_9_the_running_replica_and_a_watcher_elsewhere_sees_the_job_complete(
    schema_url: str, tmp_path: Path
):
    latency_s = 0.25
    with FakeLLMThread() as fake:
        responder = GradedResponder(latency_s=latency_s, name="openai")
        fake.respond_with("openai", responder)
        config = _fake_judges(fake, tmp_path)
        spec = _graded_openai_spec()
        env = dict.fromkeys(PROVIDER_ENV)
        with replicas(schema_url, 3, "--judges-config", str(config), env=env) as (a, b, _):
            name = stub(a).CreateJob(rank_pb2.CreateJobRequest(spec=spec)).name
            watcher = Watcher(b, name)
            watcher.wait_for_verdicts(4)
            os.kill(a.pid, signal.SIGKILL)
            killed = time.monotonic()
            events = watcher.finished()
        asked = fake.requests("openai")
    assert_whole(events)
    taken_over = watcher.first_verdict_after(killed) - killed
    # The lease, a claim loop, one call, and slack for a busy machine (a clean-clone CI run
    # with other work on its two cores took 5.6 s; 1 s of slack was not enough).
    assert taken_over < LEASE_S + 1 + latency_s + 4, taken_over
    # The only batches asked twice are those in flight when the replica died: their answers
    # were never stored. Nothing stored was asked again: no verdict streamed before the kill
    # (stored before it was streamed) is among them.
    stored_before_kill = {
        tuple(event.verdict.presented)
        for at, event in watcher.events
        if at < killed and event.HasField("verdict")
    }
    assert stored_before_kill
    asks = Counter(presented_ids(request.prompt) for request in asked)
    asked_again = {shown for shown, times in asks.items() if times > 1}
    assert not asked_again & stored_before_kill, asked_again


def _holders(db: str) -> Counter[str]:
    """Unfinished jobs per replica holding them."""
    with psycopg.connect(db) as conn:
        rows = conn.execute(
            "SELECT lease_owner FROM jobs WHERE state IN (%s, %s) AND lease_owner IS NOT NULL",
            (rank_pb2.JOB_STATE_PENDING, rank_pb2.JOB_STATE_RUNNING),
        ).fetchall()
    return Counter(owner for (owner,) in rows)


def test_sigterm_hands_the_jobs_over_at_once_and_they_spread(schema_url: str):
    with replicas(schema_url, 3) as (a, b, _):
        names = [
            stub(a).CreateJob(rank_pb2.CreateJobRequest(spec=oracle_spec(32, seed=i))).name
            for i in range(4)
        ]
        watchers = [Watcher(b, name) for name in names]
        for watcher in watchers:
            watcher.wait_for_verdicts(2)
        assert a.stop() == 0
        stopped = time.monotonic()
        time.sleep(0.5)
        # Each survivor takes its share (4 jobs, 2 replicas), not the first to look all of them.
        assert sorted(_holders(schema_url).values()) == [2, 2]
        finished = [w.finished() for w in watchers]
    for watcher, events in zip(watchers, finished, strict=True):
        assert_whole(events)
        # Handed back at once, claimed on the notification: one judge call later it goes on.
        moved_on = watcher.first_verdict_after(stopped) - stopped
        assert moved_on < 1.0 + float(LATENCY_MS) / 1000, moved_on


def test_cancel_through_a_replica_that_does_not_run_the_job(schema_url: str):
    with replicas(schema_url, 3) as (a, b, c):
        name = stub(a).CreateJob(rank_pb2.CreateJobRequest(spec=oracle_spec(40))).name
        watcher = Watcher(b, name)
        watcher.wait_for_verdicts(1)
        cancelled = stub(c).CancelJob(rank_pb2.CancelJobRequest(name=name), timeout=30)
        assert cancelled.state == rank_pb2.JOB_STATE_CANCELLED
        events = watcher.finished()
        assert stub(b).GetJob(rank_pb2.GetJobRequest(name=name)).state == cancelled.state
    assert events[-1].completed.reason == rank_pb2.COMPLETION_REASON_CANCELLED
    assert [e.sequence for e in events] == list(range(1, len(events) + 1))


def test_fifty_concurrent_creates_with_one_request_id_make_one_job(schema_url: str):
    spec = oracle_spec(8)
    with replicas(schema_url, 3) as servers:
        stubs = [stub(server) for server in servers]

        def create(i: int) -> str:
            request = rank_pb2.CreateJobRequest(spec=spec, request_id="one-job")
            return stubs[i % 3].CreateJob(request, timeout=30).name

        with ThreadPoolExecutor(50) as pool:
            names = set(pool.map(create, range(50)))
        assert len(names) == 1
        assert len(stubs[1].ListJobs(rank_pb2.ListJobsRequest()).jobs) == 1


def test_a_replica_paused_past_its_lease_is_fenced_when_it_wakes(schema_url: str, pg_schema: str):
    with replicas(schema_url, 3) as (a, b, _):
        name = stub(a).CreateJob(rank_pb2.CreateJobRequest(spec=oracle_spec(40))).name
        watcher = Watcher(b, name)
        watcher.wait_for_verdicts(2)
        os.kill(a.pid, signal.SIGSTOP)
        paused = time.monotonic()
        try:
            deadline = paused + LEASE_S + 10
            while not any(
                at > paused + LEASE_S and e.HasField("verdict") for at, e in watcher.events
            ):
                assert time.monotonic() < deadline, "nobody took the job over"
                time.sleep(0.05)
        finally:
            os.kill(a.pid, signal.SIGCONT)
        events = watcher.finished()
        time.sleep(1.0)  # the woken replica's runner meets the fence meanwhile
        log = a.log_tail(400)
    assert_whole(events)
    assert "job taken over by another replica" in log or "lease lost to another replica" in log
    job_id = name.rsplit("/", 1)[1]
    with psycopg.connect(schema_url) as conn:
        indexes = [
            i
            for (i,) in conn.execute(
                "SELECT idx FROM journal WHERE job_id = %s ORDER BY idx", (job_id,)
            )
        ]
        sequences = [
            s
            for (s,) in conn.execute(
                "SELECT sequence FROM events WHERE job_id = %s ORDER BY sequence", (job_id,)
            )
        ]
    assert indexes == list(range(len(indexes)))
    assert sequences == list(range(1, len(events) + 1))


def _owner_of(db: str, name: str) -> str:
    with psycopg.connect(db) as conn:
        row = conn.execute(
            "SELECT lease_owner FROM jobs WHERE job_id = %s", (name.rsplit("/", 1)[1],)
        ).fetchone()
    return row[0] or ""


def test_a_replica_resuming_claims_slowly_keeps_its_leases(schema_url: str):
    """A replica that claims several jobs at once and resumes them slowly (each resume reads
    the tenant's keys, here locked away) still renews their leases: the replica it raced loses
    none to it. Found on three replicas with kill -9s: a live owner lost jobs 1.2 s into a 4 s
    lease and asked their calls again (issue 34 item 8)."""
    jobs = 4
    with replicas(schema_url, 2) as (a, b):
        names = [
            stub(b).CreateJob(rank_pb2.CreateJobRequest(spec=oracle_spec(40, seed=i))).name
            for i in range(jobs)
        ]
        watchers = [Watcher(a, name) for name in names]
        for watcher in watchers:
            watcher.wait_for_verdicts(1)
        with psycopg.connect(schema_url, autocommit=False) as lock:
            # Every resume now waits on the tenants table; leases and claims do not touch it.
            lock.execute("LOCK TABLE tenants IN ACCESS EXCLUSIVE MODE")
            os.kill(b.pid, signal.SIGSTOP)
            try:
                give_up = time.monotonic() + LEASE_S + 10
                while not all(f"-{a.pid}-" in _owner_of(schema_url, n) for n in names):
                    assert time.monotonic() < give_up, "the paused replica's jobs were not taken"
                    time.sleep(0.05)
            finally:
                os.kill(b.pid, signal.SIGCONT)
            # The woken replica beats, and claims whatever lease has run out, for two leases.
            time.sleep(2 * LEASE_S)
            lock.rollback()
        finished = [watcher.finished() for watcher in watchers]
        log = a.log_path.read_text()
    for events in finished:
        assert_whole(events)
    assert "lease lost to another replica" not in log
    assert "job taken over by another replica" not in log


def test_a_lease_lost_and_claimed_back_takes_up_the_calls_in_flight(
    schema_url: str, tmp_path: Path
):
    """A replica whose lease is taken by a claim it never sees (a ghost's), and that claims the
    job back once that lease runs out, takes up the answers of the calls it had in flight
    rather than asking them again."""
    with FakeLLMThread() as fake:
        fake.respond_with("openai", GradedResponder(latency_s=1.0, name="openai"))
        config = _fake_judges(fake, tmp_path)
        spec = _graded_openai_spec(top_k=3)
        env = dict.fromkeys(PROVIDER_ENV)
        with replicas(schema_url, 1, "--judges-config", str(config), env=env) as (a,):
            name = stub(a).CreateJob(rank_pb2.CreateJobRequest(spec=spec)).name
            watcher = Watcher(a, name)
            watcher.wait_for_verdicts(2)
            with psycopg.connect(schema_url) as conn:
                conn.execute(
                    "UPDATE jobs SET lease_owner = 'ghost', lease_epoch = lease_epoch + 1, "
                    "lease_until = extract(epoch FROM clock_timestamp()) + 0.3 "
                    "WHERE job_id = %s",
                    (name.rsplit("/", 1)[1],),
                )
            events = watcher.finished()
            log = a.log_path.read_text()
        asked = fake.requests("openai")
    assert "lease lost to another replica" in log
    assert_whole(events)
    asks = Counter(presented_ids(request.prompt) for request in asked)
    assert max(asks.values()) == 1, [shown for shown, times in asks.items() if times > 1]


# -- the database goes away -------------------------------------------------------------------


def _health(server: LocalServer) -> int:
    with grpc.insecure_channel(server.address) as channel:
        reply = health_pb2_grpc.HealthStub(channel).Check(
            health_pb2.HealthCheckRequest(), timeout=5
        )
    return reply.status


def _becomes(server: LocalServer, status: int, within: float) -> bool:
    give_up = time.monotonic() + within
    while _health(server) != status:
        if time.monotonic() > give_up:
            return False
        time.sleep(0.1)
    return True


def _state_when_done(server: LocalServer, name: str, timeout: float = 60) -> int:
    give_up = time.monotonic() + timeout
    while True:
        try:
            job = stub(server).GetJob(rank_pb2.GetJobRequest(name=name), timeout=5)
            if job.state not in (rank_pb2.JOB_STATE_PENDING, rank_pb2.JOB_STATE_RUNNING):
                return job.state
        except grpc.RpcError as error:
            assert error.code() == grpc.StatusCode.UNAVAILABLE, error
        assert time.monotonic() < give_up, f"{name} did not finish"
        time.sleep(0.2)


def test_postgres_stopped_and_started_under_load_loses_no_job():
    base = Path(tempfile.mkdtemp(prefix="tierank-pg-"))
    try:
        with throwaway_cluster(base) as url:
            db = schema_url_for(url, fresh_schema())
            with replicas(db, 2) as (a, b):
                names = [
                    stub((a, b)[i % 2])
                    .CreateJob(rank_pb2.CreateJobRequest(spec=oracle_spec(20, seed=i)))
                    .name
                    for i in range(6)
                ]
                Watcher(a, names[0]).wait_for_verdicts(2)
                stop_cluster(base)
                assert _becomes(a, health_pb2.HealthCheckResponse.NOT_SERVING, within=10.0)
                time.sleep(1.0)
                start_cluster(base, url)
                states = [_state_when_done(b, name) for name in names]
                assert _becomes(a, health_pb2.HealthCheckResponse.SERVING, within=10.0)
                events = [
                    list(stub(a).WatchJob(rank_pb2.WatchJobRequest(name=name), timeout=30))
                    for name in names
                ]
    finally:
        shutil.rmtree(base, ignore_errors=True)
    assert states == [rank_pb2.JOB_STATE_SUCCEEDED] * len(names)
    for job_events in events:
        assert [e.sequence for e in job_events] == list(range(1, len(job_events) + 1))
        assert job_events[-1].HasField("completed")


def test_a_providers_request_rate_holds_in_total_across_replicas(schema_url: str, tmp_path: Path):
    rate = 8  # requests per second, for all replicas together
    with FakeLLMThread() as fake:
        fake.respond_with("openai", GradedResponder(name="openai"))
        config = judges_config(fake, prices=FAKE_MODEL_PRICES)
        config["providers"]["openai"]["rate_limit"] = {"requests": rate, "period_s": 1.0}
        path = tmp_path / "judges.json"
        path.write_text(json.dumps(config))
        env = dict.fromkeys(PROVIDER_ENV)
        # Long leases: a replica's membership outlives any stall of a busy machine, so neither
        # ever counts itself alone (and spends the whole rate) while the other runs.
        args = ("--judges-config", str(path), "--lease-seconds", "30")
        with replicas(schema_url, 2, *args, env=env) as servers:
            with psycopg.connect(schema_url) as conn:
                give_up = time.monotonic() + 30
                while conn.execute("SELECT COUNT(*) FROM replicas").fetchone()[0] < 2:
                    assert time.monotonic() < give_up, "the replicas never both beat"
                    time.sleep(0.05)
            time.sleep(2.5)  # two beats (one a second) at least: each knows the other
            watchers = []
            for i, server in enumerate(servers):
                spec = job_spec(
                    "which passage has the highest grade",
                    [candidate(c.id, c.text) for c in graded_pool(24, seed=i)],
                    judges=[judge(f"openai:{MODELS['openai']}")],
                    batch_size=4,
                )
                name = stub(server).CreateJob(rank_pb2.CreateJobRequest(spec=spec)).name
                watchers.append(Watcher(server, name))
            for watcher in watchers:
                assert_whole(watcher.finished())
        arrivals = sorted(request.at for request in fake.requests("openai"))
    # After the buckets' first burst, two seconds at the shared rate: each replica spends its
    # half (a replica on its own would have allowed twice this).
    start = arrivals[0] + 1.0
    window = [at for at in arrivals if start <= at < start + 2.0]
    assert arrivals[-1] > start + 2.0, "the jobs ended before the window"
    assert len(window) <= rate * 2.0 * 1.25, len(window)
