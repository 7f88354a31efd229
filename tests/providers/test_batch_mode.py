"""Judges in batch mode (`mode=batch`) on a real server, through the real SDKs, against the
wire-level batch fakes: the same tiers as call by call at the batch price, one provider batch
per wave, expired calls asked again, cancelling a job cancels its batch, a kill -9 while a
batch is open neither submits nor pays for a call twice, and a SIGTERM does not wait for a
batch to answer."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import grpc
import pytest
from batch_fakes import BATCH_FLAVORS, BATCH_MODELS, FakeBatchServer, judges_config
from fakes import rank_by_score
from job_helpers import completed, llm_judge, run_job, scored_spec, verdicts
from prometheus_client import REGISTRY

from tierank.server.app import background_server
from tierank.server.settings import ServerSettings
from tierank.v1 import eval_pb2, rank_pb2, rank_pb2_grpc, study_pb2, study_pb2_grpc

pytestmark = pytest.mark.long_module

flavors = pytest.mark.parametrize("flavor", BATCH_FLAVORS)


@pytest.fixture
async def fake() -> AsyncIterator[FakeBatchServer]:
    async with FakeBatchServer() as server:
        for flavor in BATCH_FLAVORS:
            server.respond_with(flavor, rank_by_score)
        yield server


@dataclass
class Served:
    """A server's two services on one channel."""

    rank: rank_pb2_grpc.RankServiceStub
    studies: study_pb2_grpc.StudyServiceStub


Start = Callable[..., Awaitable[Served]]


@pytest.fixture
async def server(
    fake: FakeBatchServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[Start]:
    for name in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "GEMINI_API_KEY", "GOOGLE_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    async with AsyncExitStack() as running:

        async def start(db: str = "tierank.db", **batches: Any) -> Served:
            """A server on database `db` (servers on different ones share no verdict cache)."""
            settings = ServerSettings(
                listen="127.0.0.1:0",
                db=tmp_path / db,
                judges_config=judges_config(fake, tmp_path / "judges.json", **batches),
                shutdown_grace_s=2.0,
            )
            address = await running.enter_async_context(background_server(settings))
            channel = await running.enter_async_context(grpc.aio.insecure_channel(address))
            return Served(
                rank_pb2_grpc.RankServiceStub(channel), study_pb2_grpc.StudyServiceStub(channel)
            )

        yield start


def judge(flavor: str, mode: str) -> rank_pb2.JudgeSpec:
    spec = llm_judge(flavor, BATCH_MODELS[flavor])
    spec.parameters.options["mode"] = mode
    return spec


def tier_ids(done: rank_pb2.JobCompleted) -> list[list[str]]:
    return [sorted(tier.candidate_ids) for tier in done.tiers]


@flavors
async def test_batch_mode_gives_the_call_by_call_tiers_at_half_the_price_one_batch_a_wave(
    server: Start, fake: FakeBatchServer, flavor: str
) -> None:
    spec = dict(n=24, batch_size=6, top_k=5, max_in_flight=4, seed=7)
    by_call_server = (await server("by-call.db")).rank
    by_call = completed(
        await run_job(by_call_server, scored_spec(judges=[judge(flavor, "call")], **spec))
    )
    assert not fake.batches
    events = await run_job(
        (await server()).rank, scored_spec(judges=[judge(flavor, "batch")], **spec)
    )
    by_batch = completed(events)

    assert tier_ids(by_batch) == tier_ids(by_call)
    assert by_batch.stats.judge_calls == by_call.stats.judge_calls
    assert by_batch.stats.failed_calls == 0 and len(verdicts(events)) == by_batch.stats.judge_calls
    # A call's latency is its wait for its batch (at least one poll of the fake's).
    assert all(v.usage.latency_seconds >= 0.02 for v in verdicts(events))
    ratio = by_batch.stats.cost_usd / by_call.stats.cost_usd
    assert ratio == pytest.approx(0.5, rel=1e-6), ratio
    # Each plan (a wave of up to max_in_flight calls) went as one provider batch, in sequence,
    # and no call was submitted twice.
    batches = list(fake.batches.values())
    assert len(batches) == by_batch.stats.critical_path
    prompts = [recorded.prompt for batch in batches for _, recorded in batch.entries]
    assert len(prompts) == len(set(prompts)) == by_batch.stats.judge_calls


async def until(condition: Callable[[], bool], timeout_s: float = 20.0) -> None:
    with anyio.fail_after(timeout_s):
        while not condition():
            await anyio.sleep(0.005)


async def started_batch_study(
    studies: study_pb2_grpc.StudyServiceStub, provider: str, queries: int
) -> study_pb2.Study:
    """A provider_batch study of `queries` queries of 6 passages, judged by `provider` in
    batch mode, labelled with rank bands (the fakes serve the batch API alone: pointwise
    probes would go call by call), started."""
    ranking = rank_pb2.JobSpec(judges=[llm_judge(provider, BATCH_MODELS[provider])], top_k=2)
    spec = study_pb2.StudySpec(
        depth=4,
        ranking=ranking,
        provider_batch=True,
        labels=eval_pb2.TierMapping(rank_bands=eval_pb2.RankBands()),
    )
    study = await studies.CreateStudy(study_pb2.CreateStudyRequest(spec=spec))
    inputs = study_pb2.AddStudyInputsRequest(study=study.name, request_id="all")
    for q in range(queries):
        inputs.topics.add(query_id=f"q{q}", text=f"which passage scores highest {q}")
        run = inputs.runs.add(system="bm25")
        for d in range(6):
            run.entries.add(query_id=f"q{q}", doc_id=f"q{q}d{d}", score=6.0 - d)
            inputs.passages.add(doc_id=f"q{q}d{d}", text=f"passage q{q}d{d} has score {d}.")
    await studies.AddStudyInputs(inputs)
    return await studies.StartStudy(study_pb2.StartStudyRequest(name=study.name))


async def job_done(stub: rank_pb2_grpc.RankServiceStub, name: str) -> rank_pb2.Job:
    with anyio.fail_after(60):
        while True:
            job = await stub.GetJob(rank_pb2.GetJobRequest(name=name, view=rank_pb2.JOB_VIEW_FULL))
            if job.state in (
                rank_pb2.JOB_STATE_SUCCEEDED,
                rank_pb2.JOB_STATE_CANCELLED,
                rank_pb2.JOB_STATE_FAILED,
            ):
                return job
            await anyio.sleep(0.05)


async def study_ended(studies: study_pb2_grpc.StudyServiceStub, name: str) -> study_pb2.Study:
    with anyio.fail_after(60):
        while True:
            study = await studies.GetStudy(study_pb2.GetStudyRequest(name=name))
            if study.state in (
                study_pb2.STUDY_STATE_SUCCEEDED,
                study_pb2.STUDY_STATE_CANCELLED,
                study_pb2.STUDY_STATE_FAILED,
            ):
                return study
            await anyio.sleep(0.05)


def prompts(batch: Any) -> list[str]:
    return [recorded.prompt for _, recorded in batch.entries]


async def test_calls_of_an_expired_batch_are_asked_again_in_a_later_one(
    server: Start, fake: FakeBatchServer
) -> None:
    stub = (await server()).rank
    fake.quirks["anthropic"].expire = True
    job = await stub.CreateJob(
        rank_pb2.CreateJobRequest(
            spec=scored_spec(12, [judge("anthropic", "batch")], batch_size=4, top_k=3)
        )
    )
    await until(lambda: any(b.outcomes is not None for b in fake.batches.values()))
    fake.quirks["anthropic"].expire = frozenset()
    done = await job_done(stub, job.name)

    assert done.state == rank_pb2.JOB_STATE_SUCCEEDED
    assert done.stats.failed_calls == 0
    first, second, *_ = fake.batches.values()
    assert set(first.outcomes.values()) == {"expired"}
    assert set(prompts(first)) <= set(prompts(second))


async def test_cancelling_a_job_cancels_its_open_batch_and_follows_it_to_its_end(
    server: Start, fake: FakeBatchServer
) -> None:
    stub = (await server()).rank
    fake.quirks["openai"].open_polls = 10**6
    cancelled = {"provider": "openai", "event": "cancelled"}
    before = REGISTRY.get_sample_value("tierank_provider_batches_total", cancelled) or 0.0
    job = await stub.CreateJob(
        rank_pb2.CreateJobRequest(spec=scored_spec(12, [judge("openai", "batch")], batch_size=4))
    )
    await until(lambda: len(fake.batches) == 1)
    (batch,) = fake.batches.values()
    await stub.CancelJob(rank_pb2.CancelJobRequest(name=job.name))
    done = await job_done(stub, job.name)
    assert done.state == rank_pb2.JOB_STATE_CANCELLED
    await until(lambda: batch.cancel_at_poll is not None)
    # Followed after the cancel until the vendor ended it (cancelling, then cancelled).
    await until(lambda: batch.outcomes is not None)
    assert set(batch.outcomes.values()) == {"cancelled"}
    assert REGISTRY.get_sample_value("tierank_provider_batches_total", cancelled) == before + 1


@pytest.mark.parametrize(
    ("flavor", "cut_off_mid_submission"),
    [("gemini", False), ("openai", True), ("anthropic", True)],
)
async def test_kill_9_with_a_batch_open_neither_submits_nor_pays_for_a_call_twice(
    fake: FakeBatchServer,
    tmp_path: Path,
    server_process: Any,
    flavor: str,
    cut_off_mid_submission: bool,
) -> None:
    """Killed once the vendor has the batch: with its id journaled (the restarted server polls
    it), or before the id was (the vendor's answer to the submission never came back: the
    restarted server finds the batch among the vendor's own)."""
    config = judges_config(fake, tmp_path / "judges.json")
    server_process.extra_env["TIERANK_JUDGES_CONFIG"] = str(config)
    quirks = fake.quirks[flavor]
    quirks.open_polls = 10**6
    if cut_off_mid_submission:
        quirks.create_delay_s = 30.0
    address = await anyio.to_thread.run_sync(server_process.start)
    spec = scored_spec(12, [judge(flavor, "batch")], batch_size=4, top_k=3)
    async with grpc.aio.insecure_channel(address) as channel:
        job = await rank_pb2_grpc.RankServiceStub(channel).CreateJob(
            rank_pb2.CreateJobRequest(spec=spec)
        )
        await until(lambda: len(fake.batches) == 1)
        if not cut_off_mid_submission:
            await until(lambda: next(iter(fake.batches.values())).polls > 0)
    await anyio.to_thread.run_sync(server_process.kill9)
    quirks.open_polls, quirks.create_delay_s = 0, 0.0

    address = await anyio.to_thread.run_sync(server_process.start)
    async with grpc.aio.insecure_channel(address) as channel:
        done = await job_done(rank_pb2_grpc.RankServiceStub(channel), job.name)
    assert done.state == rank_pb2.JOB_STATE_SUCCEEDED
    assert done.stats.failed_calls == 0
    first, *later = fake.batches.values()
    assert first.outcomes is not None  # polled to its end by the restarted server
    submitted = [prompt for batch in fake.batches.values() for prompt in prompts(batch)]
    assert len(submitted) == len(set(submitted)) == done.stats.judge_calls
    assert len(later) == done.stats.critical_path - 1


async def test_polls_refused_with_429_are_waited_out_not_failed(
    server: Start, fake: FakeBatchServer
) -> None:
    stub = (await server()).rank
    fake.quirks["gemini"].refused_polls = 3
    fake.quirks["gemini"].retry_after_s = 0
    events = await run_job(stub, scored_spec(8, [judge("gemini", "batch")], batch_size=4))
    done = completed(events)
    assert done.stats.failed_calls == 0 and done.stats.judge_calls == len(verdicts(events)) > 0
    assert fake.quirks["gemini"].refused_polls == 0  # every refusal was met


async def test_cancelling_a_study_cancels_its_open_batch_and_shows_it_ended_soon_after(
    fake: FakeBatchServer, server: Start
) -> None:
    # Polls as slow as a real study's (30 s, then longer): a cancelled batch is polled at once
    # and every CANCELLED_POLL_S until the vendor ends it, not at the end of its backoff.
    studies = (await server(first_poll_s=30.0, max_poll_s=600.0)).studies
    fake.quirks["gemini"].open_polls = 10**6
    study = await started_batch_study(studies, "gemini", queries=3)
    await until(lambda: len(fake.batches) == 1)
    (batch,) = fake.batches.values()
    assert len(batch.entries) >= 3  # the three queries' first calls, in one batch

    await studies.CancelStudy(study_pb2.CancelStudyRequest(name=study.name))
    await until(lambda: batch.cancel_at_poll is not None)
    shown = await studies.GetStudy(study_pb2.GetStudyRequest(name=study.name))
    assert shown.state == study_pb2.STUDY_STATE_CANCELLED
    # Gemini names a batch "batches/{id}".
    assert [b.vendor_id for b in shown.provider_batches] == [f"batches/{batch.id}"]
    # The vendor says "cancelling" at the first poll after the cancel, then ends it: GetStudy
    # shows it ended within a few CANCELLED_POLL_S, not after a 30 s poll.
    with anyio.fail_after(15):
        while shown.provider_batches[0].state != study_pb2.PROVIDER_BATCH_STATE_ENDED:
            await anyio.sleep(0.1)
            shown = await studies.GetStudy(study_pb2.GetStudyRequest(name=study.name))
    assert shown.provider_batches[0].vendor_status == "JOB_STATE_CANCELLED"


async def test_a_submission_refused_with_a_503_goes_in_a_later_batch(
    server: Start, fake: FakeBatchServer
) -> None:
    stub = (await server()).rank
    # The SDK's retries are off (tierank's own loop retries calls, not batch creations).
    fake.quirks["anthropic"].refused_creates = 1
    events = await run_job(stub, scored_spec(8, [judge("anthropic", "batch")], batch_size=4))
    done = completed(events)
    assert fake.quirks["anthropic"].refused_creates == 0
    assert done.stats.failed_calls == 0 and done.stats.judge_calls == len(verdicts(events)) > 0
    submitted = [r.prompt for b in fake.batches.values() for _, r in b.entries]
    assert len(submitted) == len(set(submitted)) == done.stats.judge_calls


async def test_a_vendor_refusing_every_batch_fails_the_study_with_its_message_after_retrying(
    server: Start, fake: FakeBatchServer
) -> None:
    """Issue 34, item 2: a batch creation refused with a 500 is submitted again with backoff
    for submit_retry_s (here 2 s; 15 minutes by default), not three times in a few seconds,
    and then the study fails saying why, with nothing judged and nothing labelled."""
    studies = (await server(submit_retry_s=2.0, first_poll_s=0.05, max_poll_s=0.3)).studies
    quirks = fake.quirks["anthropic"]
    quirks.refused_creates, quirks.refused_status = 10**6, 500
    started = time.monotonic()
    study = await started_batch_study(studies, "anthropic", queries=1)
    ended = await study_ended(studies, study.name)
    assert time.monotonic() - started >= 2.0, "refused creations were retried for the window"
    assert quirks.creates_refused > 3, "with backoff, more often than max_tries batches"
    assert ended.state == study_pb2.STUDY_STATE_FAILED
    assert "no judge answered" in ended.error.message
    assert "internal server error" in ended.error.message, "the vendor's own message"
    qrels = await studies.ExportStudyQrels(study_pb2.ExportStudyQrelsRequest(name=study.name))
    assert qrels.qrels == ""


async def test_sigterm_with_a_batch_open_stops_at_once_and_the_study_goes_on_after(
    fake: FakeBatchServer, tmp_path: Path, server_process: Any
) -> None:
    """A shutdown does not wait for calls that wait hours for a provider batch (issue 34, item
    7: `--shutdown-grace` was spent on them, and a study's server took ~20 s to stop): they are
    journaled, and the study, resumed, waits for the same batch, paying no call twice."""
    config = judges_config(fake, tmp_path / "judges.json")
    server_process.extra_env["TIERANK_JUDGES_CONFIG"] = str(config)
    # A grace no test waits out: the server must stop without spending it.
    server_process.extra_env["TIERANK_SHUTDOWN_GRACE"] = "3600"
    fake.quirks["gemini"].open_polls = 10**6
    address = await anyio.to_thread.run_sync(server_process.start)
    async with grpc.aio.insecure_channel(address) as channel:
        studies = study_pb2_grpc.StudyServiceStub(channel)
        study = await started_batch_study(studies, "gemini", queries=2)
        await until(lambda: len(fake.batches) == 1)
        (batch,) = fake.batches.values()
        await until(lambda: batch.polls > 0)

    # SIGTERM, then SIGKILL (exit status -9) if it has not stopped 30 s later.
    assert await anyio.to_thread.run_sync(server_process.terminate) == 0

    fake.quirks["gemini"].open_polls = 0
    address = await anyio.to_thread.run_sync(server_process.start)
    async with grpc.aio.insecure_channel(address) as channel:
        ended = await study_ended(study_pb2_grpc.StudyServiceStub(channel), study.name)
    assert ended.state == study_pb2.STUDY_STATE_SUCCEEDED, ended.error
    assert batch.outcomes is not None  # followed to its end after the restart
    submitted = [prompt for each in fake.batches.values() for prompt in prompts(each)]
    assert len(submitted) == len(set(submitted)) == ended.progress.judge_calls
