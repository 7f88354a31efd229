"""A provider_batch study (StudySpec.provider_batch): what its queries' jobs are made of, what
the API edge refuses, and the provider batches GetStudy, WatchStudy and `tierank study show`
report, from rows written straight into the server's SQLite journal."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import anyio
import grpc
import pytest
from study_calls import Stubs
from study_data import oracle_ranking

from tierank import limits
from tierank.client import AsyncClient, Client
from tierank.client._errors import error_from_rpc
from tierank.client.commands.study import progress_line
from tierank.server.app import background_server
from tierank.server.judges.batches import BATCH_PROVIDERS
from tierank.server.settings import ServerSettings
from tierank.server.storage.base import BatchState, ProviderBatchCall, ProviderBatchRecord
from tierank.server.storage.sqlite.storage import SqliteStorage
from tierank.server.studies.driver import live_queries, query_job_spec
from tierank.v1 import rank_pb2, study_pb2

TENANT = "default"  # the loopback server's, without keys


@pytest.fixture
async def stubs(server_address: str) -> AsyncIterator[Stubs]:
    async with grpc.aio.insecure_channel(server_address) as channel:
        yield Stubs.on(channel)


def batch_ranking(*judges: rank_pb2.JudgeSpec) -> rank_pb2.JobSpec:
    return rank_pb2.JobSpec(judges=judges, top_k=3)


def openai(model: str = "gpt-4.1", **options: str) -> rank_pb2.JudgeSpec:
    return rank_pb2.JudgeSpec(
        provider="openai", model=model, parameters=rank_pb2.JudgeParameters(options=options)
    )


def anthropic(model: str = "claude-sonnet-4-5") -> rank_pb2.JudgeSpec:
    return rank_pb2.JudgeSpec(provider="anthropic", model=model)


async def refused(stubs: Stubs, spec: study_pb2.StudySpec) -> dict[str, str]:
    with pytest.raises(grpc.aio.AioRpcError) as refusal:
        await stubs.studies.CreateStudy(study_pb2.CreateStudyRequest(spec=spec))
    assert refusal.value.code() == grpc.StatusCode.INVALID_ARGUMENT, refusal.value.details()
    return {v.field: v.description for v in error_from_rpc(refusal.value).field_violations}


# -- each query's job ----------------------------------------------------------------------------


def test_every_judge_of_a_query_s_job_runs_in_batch_mode() -> None:
    pool = rank_pb2.JobSpec(
        query="topic", candidates=[rank_pb2.Candidate(id=f"d{i}", text="x") for i in range(4)]
    )
    study = study_pb2.StudySpec(
        ranking=batch_ranking(openai(format="text"), anthropic()), provider_batch=True
    )
    spec = query_job_spec(study, pool.SerializeToString(), rank_pb2.JobSpec())
    assert [dict(j.parameters.options) for j in spec.judges] == [
        {"format": "text", "mode": "batch"},  # the judge's own options kept
        {"mode": "batch"},
    ]
    assert [c.id for c in spec.candidates] == ["d0", "d1", "d2", "d3"]
    # The study's ranking (stored as it was sent) is not changed, and without the flag no
    # judge is put in batch mode.
    assert "mode" not in study.ranking.judges[1].parameters.options
    study.provider_batch = False
    plain = query_job_spec(study, pool.SerializeToString(), rank_pb2.JobSpec())
    assert [dict(j.parameters.options) for j in plain.judges] == [{"format": "text"}, {}]


def test_a_batch_study_judges_the_most_queries_at_once_unless_it_says_otherwise() -> None:
    assert live_queries(study_pb2.StudySpec()) == limits.DEFAULT_LIVE_QUERIES
    assert live_queries(study_pb2.StudySpec(provider_batch=True)) == limits.MAX_LIVE_QUERIES
    assert live_queries(study_pb2.StudySpec(provider_batch=True, max_live_queries=5)) == 5


# -- the API edge --------------------------------------------------------------------------------


async def test_a_judge_without_a_batch_api_is_refused_by_its_field(stubs: Stubs) -> None:
    ranking = oracle_ranking(top_k=3)
    ranking.judges.insert(0, openai())
    spec = study_pb2.StudySpec(depth=3, ranking=ranking, provider_batch=True)
    violations = await refused(stubs, spec)
    # judges[0] (openai) has a batch API; judges[1] (oracle) has none.
    assert list(violations) == ["spec.ranking.judges[1].provider"], violations
    rule = violations["spec.ranking.judges[1].provider"]
    assert "'oracle' has no batch API" in rule
    assert all(provider in rule for provider in BATCH_PROVIDERS), rule
    listed = await stubs.studies.ListStudies(study_pb2.ListStudiesRequest())
    assert not listed.studies


async def test_a_judge_that_asks_for_calls_conflicts_with_a_batch_study(stubs: Stubs) -> None:
    spec = study_pb2.StudySpec(
        ranking=batch_ranking(openai(mode="batch"), openai("gpt-4.1-mini", mode="call")),
        provider_batch=True,
    )
    violations = await refused(stubs, spec)
    assert list(violations) == ["spec.ranking.judges[1].parameters.options.mode"], violations
    assert "'call'" in violations["spec.ranking.judges[1].parameters.options.mode"]
    # Without provider_batch, each judge's own mode is the judges' business, not the study's.
    spec.provider_batch = False
    made = await stubs.studies.CreateStudy(study_pb2.CreateStudyRequest(spec=spec))
    assert made.state == study_pb2.STUDY_STATE_DRAFT


async def test_a_judge_with_no_room_for_the_mode_option_is_refused(stubs: Stubs) -> None:
    """Checked as the queries' jobs will be made: with mode=batch added to its options."""
    full = {f"o{i}": "x" for i in range(limits.MAX_JUDGE_OPTIONS)}
    spec = study_pb2.StudySpec(ranking=batch_ranking(openai(**full)), provider_batch=True)
    violations = await refused(stubs, spec)
    assert list(violations) == ["spec.ranking.judges[0].parameters.options"], violations


async def test_the_python_clients_create_a_provider_batch_study(server_address: str) -> None:
    spec = study_pb2.StudySpec(ranking=batch_ranking(openai()))
    async with AsyncClient(server_address) as client:
        made = await client.create_study(spec, provider_batch=True)
        plain = await client.create_study(spec)

    def blocking() -> study_pb2.Study:  # in a thread: this test's loop serves the server
        with Client(server_address) as client:
            return client.create_study(spec, provider_batch=True)

    made_blocking = await anyio.to_thread.run_sync(blocking)
    assert made.spec.provider_batch and made_blocking.spec.provider_batch
    assert not plain.spec.provider_batch
    assert not spec.provider_batch  # the caller's spec is left as it was


# -- what GetStudy, WatchStudy and `study show` report ---------------------------------------


def batch(batch_id: str, owner: str, tenant: str = TENANT, **fields: object) -> ProviderBatchRecord:
    values: dict[str, object] = {"provider": "openai", "model": "gpt-4.1", "calls": 3}
    values.update(fields)
    return ProviderBatchRecord(
        batch_id=batch_id,
        tenant=tenant,
        owner=owner,
        create_time=time.time() - 600,
        **values,  # type: ignore[arg-type]
    )


async def journal(db: Path, study: str) -> None:
    """Four batches of the study as the collector leaves them (submitting, open with the
    vendor's counts, ended, failed), one of another study and one of another tenant's."""
    storage = SqliteStorage(db, synchronous="NORMAL")
    try:
        rows = [
            batch("b1", study, provider="anthropic", model="claude-sonnet-4-5", calls=40),
            batch("b2", study, calls=120),
            batch("b3", study),
            batch("b4", study),
            batch("b5", "studies/another"),
            batch("b6", study, tenant="acme"),
        ]
        for row in rows:
            call = ProviderBatchCall(row.batch_id, f"{row.batch_id}-c0", "job", row.batch_id)
            await storage.journal_batch(row, [call])
        for batch_id in ("b2", "b3", "b4"):
            assert await storage.batch_submitted(batch_id, f"batch_{batch_id}")
        counts = json.dumps({"total": 120, "completed": 80, "failed": 1, "note": None})
        await storage.batch_status("b2", BatchState.OPEN, "in_progress", counts)
        await storage.batch_status("b3", BatchState.ENDED, "completed", "{}")
        await storage.batch_status("b4", BatchState.FAILED, "failed", "{}", "input invalid")
    finally:
        await storage.close()


@dataclass
class BatchStudy:
    study: study_pb2.Study
    stubs: Stubs
    address: str


@pytest.fixture
async def batch_study(tmp_path: Path) -> AsyncIterator[BatchStudy]:
    """A draft provider_batch study whose journal holds the batches of `journal`, written while
    no server holds the database (a server locks it), on the server started again."""
    settings = ServerSettings(
        listen="127.0.0.1:0", db=tmp_path / "tierank.db", shutdown_grace_s=2.0, max_message_mb=4
    )
    spec = study_pb2.StudySpec(ranking=batch_ranking(openai()), provider_batch=True)
    async with (
        background_server(settings) as address,
        grpc.aio.insecure_channel(address) as channel,
    ):
        study = await Stubs.on(channel).studies.CreateStudy(study_pb2.CreateStudyRequest(spec=spec))
    assert study.spec.provider_batch
    assert not study.provider_batches
    await journal(settings.db, study.name)
    async with (
        background_server(settings) as address,
        grpc.aio.insecure_channel(address) as channel,
    ):
        yield BatchStudy(study, Stubs.on(channel), address)


async def test_get_and_watch_study_show_the_study_s_provider_batches(
    batch_study: BatchStudy,
) -> None:
    study, stubs = batch_study.study, batch_study.stubs
    got = await stubs.studies.GetStudy(study_pb2.GetStudyRequest(name=study.name))
    shown = {(b.vendor_id, b.state) for b in got.provider_batches}
    assert shown == {
        ("", study_pb2.PROVIDER_BATCH_STATE_SUBMITTING),
        ("batch_b2", study_pb2.PROVIDER_BATCH_STATE_OPEN),
        ("batch_b3", study_pb2.PROVIDER_BATCH_STATE_ENDED),
        ("batch_b4", study_pb2.PROVIDER_BATCH_STATE_FAILED),
    }  # neither another study's batch nor another tenant's
    submitting, open_one, ended, failed = got.provider_batches  # oldest first
    assert (submitting.provider, submitting.model, submitting.calls) == (
        "anthropic",
        "claude-sonnet-4-5",
        40,
    )
    assert not submitting.HasField("submit_time")
    assert open_one.vendor_status == "in_progress"
    assert dict(open_one.vendor_counts) == {"total": 120, "completed": 80, "failed": 1}
    assert open_one.submit_time.ToSeconds() > open_one.create_time.ToSeconds()
    assert not open_one.HasField("end_time")
    assert ended.HasField("end_time")
    assert failed.message == "input invalid"
    # WatchStudy sends the whole study, batches included; the listing leaves them out.
    call = stubs.studies.WatchStudy(study_pb2.WatchStudyRequest(name=study.name))
    with anyio.fail_after(10):
        watched = await call.read()
    call.cancel()
    assert list(watched.provider_batches) == list(got.provider_batches)
    listed = await stubs.studies.ListStudies(study_pb2.ListStudiesRequest())
    assert [s.name for s in listed.studies] == [study.name]
    assert not listed.studies[0].provider_batches


def tierank(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tierank.client", *args],
        capture_output=True,
        text=True,
        timeout=60,
    )


async def test_study_show_prints_the_unended_batches_and_counts_the_others(
    batch_study: BatchStudy,
) -> None:
    show = ("study", "show", batch_study.study.name, "--server", batch_study.address)
    # A process of its own: this test's event loop serves the server it asks.
    shown = await anyio.to_thread.run_sync(lambda: tierank(*show))
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    batch_lines = [line for line in lines if line.startswith("provider batch")]
    assert len(batch_lines) == 3, shown.stdout
    assert batch_lines[0] == (
        "provider batch anthropic/claude-sonnet-4-5 submitting (no vendor id yet): 40 calls,"
        " recorded 10m ago"
    )
    # Submitted when the test journaled it: a few seconds ago at most.
    assert re.fullmatch(
        r"provider batch openai/gpt-4\.1 open batch_b2: 120 calls, submitted \d{1,2}s ago,"
        r" in_progress \(completed 80, failed 1, total 120\)",
        batch_lines[1],
    ), batch_lines[1]
    assert batch_lines[2] == "provider batches ended: 1, failed: 1"
    as_json = await anyio.to_thread.run_sync(lambda: tierank(*show, "--json"))
    document = json.loads(as_json.stdout)
    assert [b["vendor_id"] for b in document["provider_batches"][1:]] == [
        "batch_b2",
        "batch_b3",
        "batch_b4",
    ]
    assert document["provider_batches"][1]["vendor_counts"]["completed"] == "80"  # int64


async def test_study_run_sends_provider_batch_in_the_spec(
    server_address: str, tmp_path: Path
) -> None:
    """The flag reaches the server: a study of the default (lexical) judge is refused for it,
    naming the judge, and no study is made."""
    topics = tmp_path / "topics.tsv"
    topics.write_text("q1\tbees\n")
    passages = tmp_path / "passages.tsv"
    passages.write_text("d1\tbees dance\nd2\tants march\n")
    run = tmp_path / "run.trec"
    run.write_text("q1 Q0 d1 1 2.0 sys\nq1 Q0 d2 2 1.0 sys\n")
    args = ["study", "run", "--topics", str(topics), "--passages", str(passages)]
    args += ["--run", f"sys={run}", "--server", server_address, "--provider-batch"]
    done = await anyio.to_thread.run_sync(lambda: tierank(*args))
    assert done.returncode == 2, done.stderr
    assert "spec.ranking.judges[0].provider" in done.stderr
    assert "'lexical' has no batch API" in done.stderr
    listed = await anyio.to_thread.run_sync(
        lambda: tierank("study", "list", "--json", "--server", server_address)
    )
    assert listed.returncode == 0 and listed.stdout == "", listed.stderr
    helped = await anyio.to_thread.run_sync(lambda: tierank("study", "run", "--help"))
    help_text = " ".join(helped.stdout.split())
    assert "--provider-batch" in help_text
    assert all(provider in help_text for provider in BATCH_PROVIDERS)


def test_the_progress_line_says_which_batches_a_running_study_waits_on() -> None:
    study = study_pb2.Study(name="studies/s1", state=study_pb2.STUDY_STATE_RUNNING)
    study.progress.queries = 4
    for state, calls in (
        (study_pb2.PROVIDER_BATCH_STATE_OPEN, 30),
        (study_pb2.PROVIDER_BATCH_STATE_SUBMITTING, 5),
        (study_pb2.PROVIDER_BATCH_STATE_ENDED, 40),
    ):
        study.provider_batches.add(provider="openai", state=state, calls=calls)
    assert "waiting on 2 provider batches (35 calls)" in progress_line(study)
    study.state = study_pb2.STUDY_STATE_SUCCEEDED
    assert "waiting" not in progress_line(study)
