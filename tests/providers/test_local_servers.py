"""`openai-compatible` against a server that behaves like llama-cpp-python's: one request at a
time, no `json_schema`, the request's model name echoed (issue 13, items 8, 9 and 10), and a
model list that cannot be read (issue 34, item 6)."""

from __future__ import annotations

import asyncio
import json
import statistics
import time

import pytest
from conftest import StartServer
from fakes import FakeLLMServer, Hang, LocalServer, llama_cpp_python, rank_by_score, settings_for
from job_helpers import completed, llm_judge, run_job, scored_spec, verdicts

from tierank.server.judges.base import BatchRequest, JudgeConfig, Passage, PoolContext
from tierank.server.judges.registry import JudgeFactory
from tierank.server.judges.settings import BreakerPolicy, JudgeSettings
from tierank.v1 import rank_pb2

FLAVOR = "openai-compatible"
PASSAGES = tuple(Passage(f"d{n}", f"passage d{n} has score {n}.") for n in range(1, 5))
POOL = PoolContext("q", "r", PASSAGES)
BEST_FIRST = ("d4", "d3", "d2", "d1")


def batch(call_id: str = "c") -> BatchRequest:
    return BatchRequest(call_id=call_id, query="q", rubric="r", passages=PASSAGES)


def response_formats(fake: FakeLLMServer) -> list[str | None]:
    return [(r.body.get("response_format") or {}).get("type") for r in fake.requests(FLAVOR)]


async def test_the_minimal_config_sends_one_request_at_a_time_and_times_each_from_sending(
    fake_llm: FakeLLMServer,
) -> None:
    fake_llm.local = llama_cpp_python()
    fake_llm.respond_with(FLAVOR, lambda request: Hang(0.2, then=rank_by_score(request)))
    # What docs/providers.md calls the minimal config: the base URL, nothing else.
    settings = JudgeSettings.load(
        environ={"TIERANK_OPENAI_COMPATIBLE_BASE_URL": fake_llm.base_url(FLAVOR)}
    )
    local = settings.provider(FLAVOR)
    assert (local.max_concurrency, local.timeout_s) == (1, 120.0)
    factory = JudgeFactory(settings)
    judge = factory.build(JudgeConfig(FLAVOR, "any-name"), POOL)

    replies = await asyncio.gather(*(judge.judge(batch(f"c{i}")) for i in range(6)))

    assert all(reply.ordering == BEST_FIRST for reply in replies)
    # Each request was sent only once the one before it was answered ...
    arrivals = [r.at for r in fake_llm.requests(FLAVOR)]
    finishes = [finished for _, finished in fake_llm.local.served]
    assert len(arrivals) == len(finishes) == 6
    assert all(
        later >= finish - 0.01 for later, finish in zip(arrivals[1:], finishes[:-1], strict=True)
    )
    # ... and each judge's latency is its own request's, not its wait behind the others: timed
    # from the wait's end, the six take 0.2 s each (plus what busy cores add to one or two);
    # timed from the call, they would take 0.2, 0.4, ... 1.2 s, a median of 0.7.
    latencies = sorted(reply.usage.latency_s for reply in replies)
    assert latencies[0] >= 0.2 and statistics.median(latencies) < 0.4, latencies
    await factory.aclose()


async def test_json_format_falls_back_to_json_object_once_per_endpoint(
    fake_llm: FakeLLMServer,
) -> None:
    fake_llm.local = llama_cpp_python()
    fake_llm.respond_with(FLAVOR, rank_by_score)
    # A breaker that opens on the first server error: the refusals must not count as one.
    strict = BreakerPolicy(failure_threshold=1, cooldown_s=60)
    factory = JudgeFactory(settings_for(fake_llm, breaker=strict))
    config = JudgeConfig(FLAVOR, "any-name", options={"format": "json"})

    first = await factory.build(config, POOL).judge(batch())
    assert first.failure is None and first.ordering == BEST_FIRST
    assert response_formats(fake_llm) == ["json_schema", "json_object"]

    # Another job's judge on the same endpoint goes straight to what works.
    second = await factory.build(config, POOL).judge(batch())
    assert second.failure is None and second.ordering == BEST_FIRST
    assert response_formats(fake_llm) == ["json_schema", "json_object", "json_object"]
    await factory.aclose()


async def test_json_format_falls_back_to_plain_text_when_no_structured_output_is_served(
    fake_llm: FakeLLMServer,
) -> None:
    fake_llm.local = LocalServer(refused_formats=frozenset({"json_schema", "json_object"}))
    fake_llm.respond_with(FLAVOR, rank_by_score)
    factory = JudgeFactory(settings_for(fake_llm))

    reply = await factory.build(
        JudgeConfig(FLAVOR, "any-name", options={"format": "json"}), POOL
    ).judge(batch())

    assert reply.failure is None and reply.ordering == BEST_FIRST
    assert response_formats(fake_llm) == ["json_schema", "json_object", None]
    await factory.aclose()


async def test_a_json_job_against_llama_cpp_python_settles(
    fake_llm: FakeLLMServer, judged_server: StartServer
) -> None:
    fake_llm.local = llama_cpp_python()
    fake_llm.respond_with(FLAVOR, rank_by_score)
    stub = await judged_server()
    judge = llm_judge(FLAVOR)
    judge.parameters.options["format"] = "json"
    events = await run_job(stub, scored_spec(12, [judge], batch_size=4))

    done = completed(events)
    assert done.reason == rank_pb2.COMPLETION_REASON_SETTLED
    assert not any(v.failed for v in verdicts(events))
    assert response_formats(fake_llm).count("json_schema") == 1


async def test_new_weights_under_the_same_name_are_asked_again(
    fake_llm: FakeLLMServer, judged_server: StartServer
) -> None:
    fake_llm.local = llama_cpp_python("/models/qwen2.5-7b-instruct-q4_k_m.gguf")
    fake_llm.respond_with(FLAVOR, rank_by_score)
    stub = await judged_server()
    spec = scored_spec(12, [llm_judge(FLAVOR)], batch_size=4, max_in_flight=1)

    first = await run_job(stub, spec)
    assert not any(v.cached for v in verdicts(first))
    # The same weights again: the cache answers (at least every call after the job's first,
    # once the judge has read the server's model list).
    again = await run_job(stub, spec)
    assert sum(v.cached for v in verdicts(again)) >= len(verdicts(again)) - 1 >= 1
    asked = len(fake_llm.requests(FLAVOR))

    # The server restarts with other weights, under the same name: nothing comes from the cache.
    fake_llm.local = llama_cpp_python("/models/llama-3.1-8b-instruct-q4_k_m.gguf")
    swapped = await run_job(stub, spec)
    assert not any(v.cached for v in verdicts(swapped))
    assert len(fake_llm.requests(FLAVOR)) == asked + len(verdicts(swapped))
    assert completed(swapped).reason == rank_pb2.COMPLETION_REASON_SETTLED


async def test_cache_identity_follows_what_the_server_reports(fake_llm: FakeLLMServer) -> None:
    fake_llm.respond_with(FLAVOR, rank_by_score)
    factory = JudgeFactory(settings_for(fake_llm))

    async def prepared_identity() -> tuple[bool, str]:
        judge = factory.build(JudgeConfig(FLAVOR, "any-name"), POOL)
        await judge.prepare()
        return judge.cacheable, judge.cache_identity()

    # A listing stamped with the time of the request (vLLM, llama.cpp) is the same weights.
    served = {"id": "Qwen/Qwen2.5-7B-Instruct", "root": "/models/qwen", "max_model_len": 32768}
    fake_llm.local = LocalServer(models=[{**served, "created": int(time.time())}])
    one = await prepared_identity()
    fake_llm.local = LocalServer(models=[{**served, "created": int(time.time()) + 1}])
    assert await prepared_identity() == one
    assert one[0] and "/models/qwen" in one[1]
    fake_llm.local = LocalServer(models=[{**served, "root": "/models/qwen-v2"}])
    assert await prepared_identity() != one

    # No /v1/models: not cacheable until an answer names the model that gave it.
    fake_llm.local = LocalServer(models=None, one_at_a_time=False)
    judge = factory.build(JudgeConfig(FLAVOR, "any-name"), POOL)
    await judge.prepare()
    assert not judge.cacheable
    await judge.judge(batch())
    assert judge.cacheable
    assert json.loads(judge.cache_identity())["served_model"] == "any-name"

    # A list that exists but could not be read this time: no stand-in, no cache for this job.
    fake_llm.local = LocalServer(models_error=503, one_at_a_time=False)
    judge = factory.build(JudgeConfig(FLAVOR, "any-name"), POOL)
    await judge.judge(batch())
    assert not judge.cacheable
    await factory.aclose()


async def test_the_cache_can_be_switched_off_for_an_endpoint(fake_llm: FakeLLMServer) -> None:
    fake_llm.local = llama_cpp_python()
    fake_llm.respond_with(FLAVOR, rank_by_score)
    factory = JudgeFactory(settings_for(fake_llm, cache_verdicts=False))
    judge = factory.build(JudgeConfig(FLAVOR, "any-name"), POOL)
    await judge.judge(batch())
    assert not judge.cacheable
    await factory.aclose()


# What a `GET /v1/models` answered with 200 may hold that is no model list (issue 34, item 6).
UNREADABLE_LISTINGS = {
    "json-that-is-not": ("application/json", "<html><body>502 Bad Gateway</body></html>"),
    "an-html-page": ("text/html", "<html><body>Loading model...</body></html>"),
    "json-of-another-shape": ("application/json", '{"object": "list", "data": "none yet"}'),
}


@pytest.mark.parametrize("body", UNREADABLE_LISTINGS.values(), ids=UNREADABLE_LISTINGS.keys())
async def test_a_model_list_that_cannot_be_read_only_turns_the_cache_off(
    fake_llm: FakeLLMServer, judged_server: StartServer, body: tuple[str, str]
) -> None:
    # docs/providers.md: a model list that could not be read for a job turns off the verdict
    # cache for it; the job itself runs as any other (it failed INTERNAL on a JSON error).
    fake_llm.local = LocalServer(models_body=body, one_at_a_time=False)
    fake_llm.respond_with(FLAVOR, rank_by_score)
    stub = await judged_server()
    spec = scored_spec(8, [llm_judge(FLAVOR)], batch_size=4)

    first = await run_job(stub, spec)
    again = await run_job(stub, spec)

    for events in (first, again):
        assert completed(events).reason == rank_pb2.COMPLETION_REASON_SETTLED
        assert verdicts(events) and not any(v.failed or v.cached for v in verdicts(events))
    assert fake_llm.model_listings >= 2
