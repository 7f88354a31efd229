"""A restarted server never pays a provider twice for a verdict it has stored: not when it
resumes a job after kill -9, and not when the same job is submitted again."""

from __future__ import annotations

import time
from collections import Counter

import grpc
from e2e_jobs import completed, flatten, graded_spec, judge_stats, run_job, verdicts
from fakes import Hang
from graded_fakes import answer_by_grade, best_first, graded_pool, presented_ids

from tierank.v1 import rank_pb2, rank_pb2_grpc


def _create(address: str, spec: rank_pb2.JobSpec) -> str:
    with grpc.insecure_channel(address) as channel:
        stub = rank_pb2_grpc.RankServiceStub(channel)
        return stub.CreateJob(rank_pb2.CreateJobRequest(spec=spec, request_id="crash")).name


def _watch(address: str, name: str, stop_after_verdicts: int | None = None):
    with grpc.insecure_channel(address) as channel:
        stub = rank_pb2_grpc.RankServiceStub(channel)
        events = []
        for event in stub.WatchJob(rank_pb2.WatchJobRequest(name=name)):
            events.append(event)
            if stop_after_verdicts is not None and len(verdicts(events)) >= stop_after_verdicts:
                break
        return events


def _wait_for_verdicts(address: str, names: list[str], within_s: float = 10.0) -> list[str]:
    """The verdicts (by resource name) that GetVerdict can read back within `within_s`."""
    give_up_at = time.monotonic() + within_s
    found: list[str] = []
    with grpc.insecure_channel(address) as channel:
        stub = rank_pb2_grpc.RankServiceStub(channel)
        for name in names:
            while time.monotonic() < give_up_at:
                try:
                    stub.GetVerdict(rank_pb2.GetVerdictRequest(name=name))
                except grpc.RpcError as error:
                    assert error.code() == grpc.StatusCode.NOT_FOUND
                    time.sleep(0.05)
                    continue
                found.append(name)
                break
    return found


def test_an_answer_is_stored_as_it_arrives_and_never_bought_again_after_kill_9(
    fake_llm, write_judges_config, server_process
):
    """One judge answers at once, the other hangs: no plan is ever whole when the server is
    killed, yet the answers that came in were paid for and must not be asked for again."""
    answer_by_grade(fake_llm, ("openai", "gemini"))
    first_wave = 4
    fake_llm.script("gemini", *[Hang(30.0)] * first_wave)
    server_process.extra_env = {"TIERANK_JUDGES_CONFIG": str(write_judges_config())}
    pool = graded_pool(20, seed=3, words=10)
    spec = graded_spec(
        pool,
        ("openai", "gemini"),
        top_k=0,
        batch_size=5,
        max_in_flight=2 * first_wave,
        ensemble="all",
    )

    address = server_process.start()
    name = _create(address, spec)
    answered = [f"{name}/verdicts/b{batch}.j0" for batch in range(first_wave)]
    stored = _wait_for_verdicts(address, answered)
    server_process.kill9()
    assert stored == answered, "answers are durable before their plan is whole"
    assert len(fake_llm.requests("openai")) == first_wave

    address = server_process.start()
    history = _watch(address, name)
    assert server_process.terminate() == 0
    assert completed(history).reason == rank_pb2.COMPLETION_REASON_SETTLED
    assert flatten(completed(history).tiers) == best_first(pool)
    asked = Counter(presented_ids(r.prompt) for r in fake_llm.requests("openai"))
    assert set(asked.values()) == {1}, "an answer received before the kill was bought again"
    assert len(verdicts(history)) == len({v.call_id for v in verdicts(history)})


def test_kill_9_mid_job_never_repeats_a_provider_call_with_a_stored_verdict(
    fake_llm, write_judges_config, server_process
):
    flavor = "openai"
    answer_by_grade(fake_llm, (flavor,), latency_s=0.1)
    server_process.extra_env = {"TIERANK_JUDGES_CONFIG": str(write_judges_config())}
    pool = graded_pool(40, seed=7, words=10)
    spec = graded_spec(pool, (flavor,), top_k=0, batch_size=5, max_in_flight=4)

    address = server_process.start()
    name = _create(address, spec)
    _watch(address, name, stop_after_verdicts=8)
    server_process.kill9()
    killed_at, killed_at_monotonic = time.time(), time.monotonic()
    address = server_process.start()
    history = _watch(address, name)
    assert server_process.terminate() == 0

    done = completed(history)
    assert done.reason == rank_pb2.COMPLETION_REASON_SETTLED
    assert flatten(done.tiers) == best_first(pool)
    stored_before_kill = [
        e.verdict
        for e in history
        if e.HasField("verdict") and e.time.ToNanoseconds() < killed_at * 1e9
    ]
    resumed = [v for v in verdicts(history) if v not in stored_before_kill]
    assert len(stored_before_kill) >= 8 and resumed
    # One judge, so each batch's presentation order identifies its prompt.
    requests = fake_llm.requests(flavor)
    asked = Counter(presented_ids(r.prompt) for r in requests)
    for verdict in stored_before_kill:
        assert asked[tuple(verdict.presented)] == 1, f"{verdict.call_id} was asked again"
    for verdict in resumed:
        times = [r.at for r in requests if presented_ids(r.prompt) == tuple(verdict.presented)]
        # Asked again only when its first request was cut off by the kill.
        assert len(times) == 1 or (len(times) == 2 and times[0] < killed_at_monotonic < times[1]), (
            verdict.call_id
        )
    assert len(verdicts(history)) == len({v.call_id for v in verdicts(history)})


async def test_the_same_job_after_a_restart_is_answered_from_the_verdict_cache(
    fake_llm, write_judges_config, start_server
):
    flavors = ("openai", "gemini")
    answer_by_grade(fake_llm, flavors)
    config = write_judges_config()
    # One call in flight: the repeated job plans exactly the batches the first one did.
    spec = graded_spec(graded_pool(30, seed=8), flavors, top_k=5, max_in_flight=1)
    async with grpc.aio.insecure_channel(await start_server(config)) as channel:
        first = await run_job(rank_pb2_grpc.RankServiceStub(channel), spec, "first")
    requests_after_first = {f: len(fake_llm.requests(f)) for f in flavors}
    # start_server stops the running server first: this is a restart on the same database.
    async with grpc.aio.insecure_channel(await start_server(config)) as channel:
        again = await run_job(rank_pb2_grpc.RankServiceStub(channel), spec, "again")

    assert {f: len(fake_llm.requests(f)) for f in flavors} == requests_after_first
    assert verdicts(first) and all(not v.cached for v in verdicts(first))
    cached = verdicts(again)
    assert cached and all(v.cached and not v.failed for v in cached)
    assert [(v.call_id, v.ordering) for v in cached] == [
        (v.call_id, v.ordering) for v in verdicts(first)
    ]
    assert completed(again).tiers == completed(first).tiers
    stats = completed(again).stats
    assert stats.judge_calls == 0 and stats.cost_usd == 0 and stats.input_tokens == 0
    assert stats.cached_calls == len(cached)
    assert sum(judge_stats(stats, j.judge).cached_calls for j in stats.judges) == len(cached)
