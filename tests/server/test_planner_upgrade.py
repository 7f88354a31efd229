"""Rolling upgrades: a job planned by one server is resumed by the next, whose defaults or
planner differ, and completes without asking any recorded call again.

Two in-process servers run one after the other on one SQLite file; the first is stopped
mid-job (a drain with a short grace abandons the calls in flight), and what changed between
the versions is patched in between.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, closing
from pathlib import Path

import grpc
import pytest

from tierank import limits
from tierank.scheduler import FrontierStrategy, selection
from tierank.server.app import background_server
from tierank.server.jobs import runner
from tierank.server.settings import ServerSettings
from tierank.v1 import rank_pb2, rank_pb2_grpc

# Long enough that the calls planned with the last answers seen are still in flight when the
# first server stops.
JUDGE_LATENCY_MS = "150"


@asynccontextmanager
async def _server(db: Path, grace_s: float) -> AsyncIterator[rank_pb2_grpc.RankServiceStub]:
    settings = ServerSettings(
        listen="127.0.0.1:0", db=db, shutdown_grace_s=grace_s, max_message_mb=4
    )
    async with (
        background_server(settings) as address,
        grpc.aio.insecure_channel(address) as channel,
    ):
        yield rank_pb2_grpc.RankServiceStub(channel)


async def _start_and_stop_midway(
    db: Path, spec: rank_pb2.JobSpec, verdicts: int, grace_s: float
) -> tuple[str, set[str]]:
    """Create a job, stop its server once `verdicts` answers are in; the job and those ids."""
    async with _server(db, grace_s) as stub:
        job = await stub.CreateJob(rank_pb2.CreateJobRequest(spec=spec, request_id="upgrade"))
        seen: set[str] = set()
        watch = stub.WatchJob(rank_pb2.WatchJobRequest(name=job.name))
        async for event in watch:
            assert not event.HasField("completed"), "the job must still be under way"
            if event.HasField("verdict"):
                seen.add(event.verdict.call_id)
            if len(seen) >= verdicts:
                break
        watch.cancel()
    return job.name, seen


async def _resume_to_the_end(db: Path, name: str) -> tuple[rank_pb2.Job, list[rank_pb2.JobEvent]]:
    async with _server(db, grace_s=2.0) as stub:
        events = [e async for e in stub.WatchJob(rank_pb2.WatchJobRequest(name=name), timeout=60)]
        return await stub.GetJob(rank_pb2.GetJobRequest(name=name)), events


def _journal(db: Path, name: str) -> list[tuple[str, bytes]]:
    with closing(sqlite3.connect(db)) as conn:
        return conn.execute(
            "SELECT kind, payload FROM journal WHERE job_id = ? ORDER BY idx",
            (name.removeprefix("jobs/"),),
        ).fetchall()


def _unanswered(journal: list[tuple[str, bytes]]) -> dict[str, list[str]]:
    """Calls planned but not answered in `journal`: each one's presented ids."""
    planned = {
        call["call_id"]: call["presented"]
        for kind, payload in journal
        if kind == "plan"
        for call in json.loads(payload)
    }
    for kind, payload in journal:
        if kind == "verdict":
            planned.pop(rank_pb2.VerdictReceived.FromString(payload).call_id)
    return planned


def _verdicts(events: list[rank_pb2.JobEvent]) -> list[rank_pb2.VerdictReceived]:
    return [e.verdict for e in events if e.HasField("verdict")]


def _assert_succeeded_asking_each_call_once(
    job: rank_pb2.Job, events: list[rank_pb2.JobEvent], before: set[str]
) -> None:
    assert job.state == rank_pb2.JOB_STATE_SUCCEEDED
    assert events[-1].completed.reason == rank_pb2.COMPLETION_REASON_SETTLED
    call_ids = [v.call_id for v in _verdicts(events)]
    assert len(call_ids) == len(set(call_ids)), "a call was asked twice"
    assert before <= set(call_ids)


def _reversed_first_wave(self, size: int, batch_size: int, top_k: int) -> list[tuple[int, ...]]:
    return selection.first_wave_in_prior_order(size, batch_size, top_k)[::-1]


async def test_changed_defaults_resume_with_the_config_the_job_was_planned_with(
    tmp_path: Path, make_spec, oracle_judge, monkeypatch: pytest.MonkeyPatch
):
    db = tmp_path / "tierank.db"
    # No batch size in the spec: the server's default decides it.
    spec = make_spec(
        n=50, top_k=0, max_in_flight=2, judges=[oracle_judge(noise=0.3, latency_ms="30")]
    )
    name, before = await _start_and_stop_midway(db, spec, verdicts=3, grace_s=2.0)
    kind, payload = _journal(db, name)[0]
    assert kind == "planner"
    recorded = json.loads(payload)
    assert recorded["version"] == runner.PLANNER_VERSION
    assert recorded["config"]["batch_size"] == limits.DEFAULT_BATCH_SIZE == 10

    monkeypatch.setattr(limits, "DEFAULT_BATCH_SIZE", 5)
    job, events = await _resume_to_the_end(db, name)

    _assert_succeeded_asking_each_call_once(job, events, before)
    after = [v for v in _verdicts(events) if v.call_id not in before]
    assert max(len(v.presented) for v in after) > 5, "planned on with the recorded batch size"


@pytest.mark.parametrize("version_bumped", [True, False], ids=["bumped", "forgotten"])
async def test_new_planner_rules_resume_the_recorded_calls_without_asking_them_again(
    tmp_path: Path, make_spec, oracle_judge, monkeypatch: pytest.MonkeyPatch, version_bumped
):
    db = tmp_path / "tierank.db"
    spec = make_spec(
        n=60,
        top_k=0,
        batch_size=10,
        max_in_flight=2,
        judges=[oracle_judge(noise=0.3, latency_ms=JUDGE_LATENCY_MS)],
    )
    name, before = await _start_and_stop_midway(db, spec, verdicts=2, grace_s=0.05)
    journal = _journal(db, name)
    in_flight = _unanswered(journal)
    assert in_flight, "calls were in flight when the first server stopped"
    shown = {
        candidate
        for kind, payload in journal
        if kind == "plan"
        for call in json.loads(payload)
        for candidate in call["presented"]
    }

    # The next version plans its first wave tail first; forgetting to bump the version must not
    # fail the job either (the replay sees the difference).
    if version_bumped:
        monkeypatch.setattr(runner, "PLANNER_VERSION", runner.PLANNER_VERSION + 1)
    monkeypatch.setattr(FrontierStrategy, "first_wave", _reversed_first_wave)
    job, events = await _resume_to_the_end(db, name)

    _assert_succeeded_asking_each_call_once(job, events, before)
    verdicts = {v.call_id: v for v in _verdicts(events)}
    for call_id, presented in in_flight.items():
        assert list(verdicts[call_id].presented) == presented, "asked as recorded"
    new_calls = [v for v in _verdicts(events) if v.call_id not in before | in_flight.keys()]
    first_new = min(new_calls, key=lambda v: v.batch)
    assert "c059" in first_new.presented and not shown & set(first_new.presented), (
        "the rest of the first wave, planned by the new rules"
    )
    assert _journal(db, name)[0] == journal[0], "the job still names the planner that began it"


async def test_a_journal_from_before_planner_rows_still_resumes(
    tmp_path: Path, make_spec, oracle_judge
):
    db = tmp_path / "tierank.db"
    spec = make_spec(
        n=40,
        top_k=0,
        max_in_flight=2,
        judges=[oracle_judge(noise=0.3, latency_ms=JUDGE_LATENCY_MS)],
    )
    name, before = await _start_and_stop_midway(db, spec, verdicts=2, grace_s=0.05)
    _rewrite_as_before_planner_rows(db, name)
    job, events = await _resume_to_the_end(db, name)
    _assert_succeeded_asking_each_call_once(job, events, before)


def _rewrite_as_before_planner_rows(db: Path, name: str) -> None:
    """The journal an older server wrote: no planner row, plans as lists of call ids."""
    job_id = name.removeprefix("jobs/")
    old: list[tuple[str, bytes]] = []
    for kind, payload in _journal(db, name):
        if kind == "plan":
            old.append((kind, json.dumps([c["call_id"] for c in json.loads(payload)]).encode()))
        elif kind != "planner":
            old.append((kind, payload))
    with closing(sqlite3.connect(db)) as conn, conn:
        conn.execute("DELETE FROM journal WHERE job_id = ?", (job_id,))
        conn.executemany(
            "INSERT INTO journal (job_id, idx, kind, payload) VALUES (?, ?, ?, ?)",
            [(job_id, index, kind, payload) for index, (kind, payload) in enumerate(old)],
        )
