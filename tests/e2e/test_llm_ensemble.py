"""LLM judges end to end: a real server, real gRPC and the real provider SDKs, talking to fake
provider servers on loopback that rank each prompt's passages by a grade hidden in their text."""

from __future__ import annotations

import json

import grpc
import pytest
from e2e_jobs import (
    completed,
    expected_cost,
    flatten,
    graded_spec,
    judge_name,
    judge_stats,
    run_job,
    verdicts,
)
from fakes import FLAVORS, Answer, HttpError
from google.rpc import error_details_pb2
from graded_fakes import (
    CACHED_PREFIX_TOKENS,
    FAKE_MODEL_PRICES,
    GradedResponder,
    answer_by_grade,
    best_first,
    graded_pool,
    presented_ids,
    reverse_pairs,
)
from grpc_status import rpc_status

from tierank.server.judges.llm import RAW_TEXT_SEPARATOR
from tierank.v1 import rank_pb2, rank_pb2_grpc

THREE_PROVIDERS = ("openai", "anthropic", "gemini")


async def test_three_providers_rank_the_top_k_with_exact_usage_and_cost(
    fake_llm, write_judges_config, start_server
):
    responders = answer_by_grade(fake_llm, THREE_PROVIDERS)
    pool = graded_pool(30, seed=1)
    max_in_flight = 6
    spec = graded_spec(pool, THREE_PROVIDERS, top_k=5, batch_size=10, max_in_flight=max_in_flight)
    async with grpc.aio.insecure_channel(await start_server(write_judges_config())) as channel:
        events = await run_job(rank_pb2_grpc.RankServiceStub(channel), spec, "three")

    done = completed(events)
    assert done.reason == rank_pb2.COMPLETION_REASON_SETTLED
    assert flatten(done.tiers)[:5] == best_first(pool)[:5]
    assert all(len(t.candidate_ids) == 1 and t.settled for t in done.tiers[:5])

    for flavor in THREE_PROVIDERS:
        name = judge_name(flavor)
        stats = judge_stats(done.stats, name)
        own = verdicts(events, name)
        assert own and not any(v.failed or v.cached for v in own)
        # Each verdict is the one answer the fake gave to the prompt showing that batch.
        answers = [a for v in own for a in responders[flavor].answers_for(v.presented)]
        assert len(answers) == len(own) == stats.calls
        price = FAKE_MODEL_PRICES[name]
        assert stats.usage.input_tokens == sum(a.input_tokens for a in answers)
        assert stats.usage.output_tokens == sum(a.output_tokens for a in answers)
        assert stats.usage.cached_input_tokens == len(answers) * CACHED_PREFIX_TOKENS
        assert stats.usage.cost_usd == pytest.approx(
            sum(expected_cost(a, price) for a in answers), rel=1e-9
        )
        assert all(v.usage.cached_input_tokens == CACHED_PREFIX_TOKENS for v in own)
        assert stats.failed_calls == 0 and not stats.breaker_open and stats.agreement_rate == 1.0
        # Requests beyond the verdicts can only be calls still in flight when the top-K
        # settled (the job stops waiting for them).
        assert 0 <= len(fake_llm.requests(flavor)) - stats.calls <= max_in_flight
    totals = done.stats
    assert totals.judge_calls == sum(j.calls for j in totals.judges)
    assert totals.cached_input_tokens == sum(j.usage.cached_input_tokens for j in totals.judges)
    assert totals.cost_usd == pytest.approx(sum(j.usage.cost_usd for j in totals.judges))


@pytest.mark.parametrize("failure", ["http-500", "garbage"])
async def test_a_failing_judge_is_reported_and_the_others_finish_the_job(
    failure, fake_llm, write_judges_config, start_server
):
    good = ("openai", "anthropic")
    answer_by_grade(fake_llm, good)
    failing = "openai-compatible"
    breaker_threshold = 3
    if failure == "http-500":
        fake_llm.respond_with(failing, lambda request: HttpError(500, message="boom"))
    else:
        fake_llm.respond_with(failing, lambda request: Answer("I would rather not rank these."))
    config = write_judges_config(
        breaker={failing: {"failure_threshold": breaker_threshold, "cooldown_s": 60.0}}
    )
    # Ten first-wave batches: more than enough calls for the failing judge to be dropped.
    pool = graded_pool(100, seed=2, words=10)
    max_in_flight = 6
    spec = graded_spec(pool, (*good, failing), top_k=5, max_in_flight=max_in_flight)
    async with grpc.aio.insecure_channel(await start_server(config)) as channel:
        events = await run_job(rank_pb2_grpc.RankServiceStub(channel), spec, failure)

    done = completed(events)
    assert done.reason == rank_pb2.COMPLETION_REASON_SETTLED
    assert flatten(done.tiers)[:5] == best_first(pool)[:5]

    bad = judge_stats(done.stats, judge_name(failing))
    # breaker_open reads true only where the breaker itself refused the calls (issue 13, #26).
    assert bad.breaker_open == (failure == "http-500")
    assert bad.calls == bad.failed_calls >= 1
    bad_verdicts = verdicts(events, judge_name(failing))
    assert bad_verdicts and all(v.failed and not v.ordering for v in bad_verdicts)
    reasons = [v.failure_reason for v in bad_verdicts]
    assert bad.last_error == reasons[-1]
    requests = len(fake_llm.requests(failing))
    if failure == "http-500":
        # Calls refused by the open breaker still name the provider's own error.
        assert all(r.startswith(("server_error:", "unavailable:")) for r in reasons), reasons
        assert all("HTTP 500" in r and "boom" in r for r in reasons), reasons
        # The breaker stops the provider being hammered: after `breaker_threshold` failed
        # requests, at most one more attempt per call already past its breaker check.
        assert requests <= breaker_threshold + max_in_flight
    else:
        assert all(r.startswith("unparseable:") for r in reasons)
        # Prompt plus one corrective follow-up per call, and at most one judge's worth of
        # calls in flight after the fifth failure in a row.
        assert requests == 2 * bad.calls <= 2 * (5 + max_in_flight)
    for flavor in good:
        stats = judge_stats(done.stats, judge_name(flavor))
        assert stats.failed_calls == 0 and not stats.breaker_open and not stats.last_error


async def test_adaptive_ensemble_asks_the_third_judge_only_where_the_quorum_disagrees(
    fake_llm, write_judges_config, start_server
):
    pool = graded_pool(20, seed=3)
    truth = best_first(pool)
    contested = [(truth[0], truth[1]), (truth[2], truth[3]), (truth[4], truth[5])]
    responders = answer_by_grade(fake_llm, ("openai", "gemini"))
    # The second quorum judge always gets three pairs of the top six the wrong way round.
    responders["anthropic"] = GradedResponder(twist=reverse_pairs(contested))
    fake_llm.respond_with("anthropic", responders["anthropic"])
    # One call at a time: the job settles as soon as its votes allow, abandoning calls in
    # flight, so only sequential calls make which verdicts exist independent of timing.
    spec = graded_spec(
        pool,
        ("openai", "anthropic", "gemini"),
        top_k=5,
        batch_size=5,
        max_in_flight=1,
        ensemble="adaptive",
        quorum=2,
    )
    async with grpc.aio.insecure_channel(await start_server(write_judges_config())) as channel:
        events = await run_job(rank_pb2_grpc.RankServiceStub(channel), spec, "adaptive")

    done = completed(events)
    assert done.reason == rank_pb2.COMPLETION_REASON_SETTLED
    assert flatten(done.tiers)[:5] == truth[:5]

    first, second_judge, third = (judge_name(f) for f in ("openai", "anthropic", "gemini"))
    orderings: dict[int, dict[str, tuple[str, ...]]] = {}
    members: dict[int, frozenset[str]] = {}
    for v in verdicts(events):
        orderings.setdefault(v.batch, {})[v.judge] = tuple(v.ordering)
        members[v.batch] = frozenset(v.presented)
    disagreeing = {
        batch
        for batch, by_judge in orderings.items()
        if first in by_judge
        and second_judge in by_judge
        and by_judge[first] != by_judge[second_judge]
    }
    assert all(any({a, b} <= members[batch] for a, b in contested) for batch in disagreeing)
    asked_third = {v.batch for v in verdicts(events, third)}
    assert asked_third, "no batch needed the third judge: the test proves nothing"
    assert asked_third <= disagreeing
    # At the third provider's own server: one request per disagreeing batch at most, each
    # showing exactly that batch's candidates.
    third_requests = [frozenset(presented_ids(r.prompt)) for r in fake_llm.requests("gemini")]
    disagreeing_members = [members[b] for b in disagreeing]
    assert all(shown in disagreeing_members for shown in third_requests)
    assert len(third_requests) == len(set(third_requests)) <= len(disagreeing)
    assert judge_stats(done.stats, third).calls < judge_stats(done.stats, first).calls


@pytest.mark.parametrize(
    "budget",
    [{"max_cost_usd": 0.06}, {"max_input_tokens": 20_000}],
    ids=["cost", "input-tokens"],
)
async def test_budget_is_never_overshot_with_eight_calls_in_flight(
    budget, fake_llm, write_judges_config, start_server
):
    flavors = ("openai", "anthropic")
    latency_s = 0.1
    responders = answer_by_grade(fake_llm, flavors, latency_s=latency_s)
    pool = graded_pool(60, seed=4)
    spec = graded_spec(pool, flavors, top_k=0, max_in_flight=8, **budget)
    async with grpc.aio.insecure_channel(await start_server(write_judges_config())) as channel:
        events = await run_job(rank_pb2_grpc.RankServiceStub(channel), spec, "budget")

    done = completed(events)
    assert done.reason == rank_pb2.COMPLETION_REASON_BUDGET_EXHAUSTED
    assert any(not t.settled for t in done.tiers)
    # What the providers would bill: every answer they gave, not only those the job recorded.
    billed = [
        (answered.answer, FAKE_MODEL_PRICES[judge_name(flavor)])
        for flavor in flavors
        for answered in responders[flavor].answered
    ]
    assert len(billed) == done.stats.judge_calls >= 2
    if "max_cost_usd" in budget:
        limit = budget["max_cost_usd"]
        assert done.stats.cost_usd <= limit
        assert sum(expected_cost(a, price) for a, price in billed) <= limit
        assert done.stats.cost_usd > 0
    else:
        limit = budget["max_input_tokens"]
        assert done.stats.input_tokens <= limit
        assert sum(a.input_tokens for a, _ in billed) <= limit
    arrivals = sorted(r.at for f in flavors for r in fake_llm.requests(f))
    concurrent_start = [t for t in arrivals if t - arrivals[0] < latency_s / 2]
    assert len(concurrent_start) >= 2, "calls ran in parallel under the budget"


async def test_get_verdict_returns_the_prompt_the_provider_received_and_its_raw_answer(
    fake_llm, write_judges_config, start_server
):
    flavor = "anthropic"
    responder = answer_by_grade(fake_llm, (flavor,))[flavor]
    # The first call's first answer is unreadable, so its audit holds both of its answers.
    unreadable = "Let me think about it."
    fake_llm.script(flavor, Answer(unreadable))
    pool = graded_pool(12, seed=6)
    spec = graded_spec(pool, (flavor,), top_k=3, batch_size=4, max_in_flight=1)
    async with grpc.aio.insecure_channel(await start_server(write_judges_config())) as channel:
        stub = rank_pb2_grpc.RankServiceStub(channel)
        events = await run_job(stub, spec, "audit")
        records = [
            await stub.GetVerdict(
                rank_pb2.GetVerdictRequest(name=f"{events[0].job}/verdicts/{v.call_id}")
            )
            for v in verdicts(events)
        ]

    requests = fake_llm.requests(flavor)
    assert records and len(requests) == len(records) + 1  # one corrective follow-up
    for index, (record, verdict) in enumerate(zip(records, verdicts(events), strict=True)):
        assert record.name == f"{events[0].job}/verdicts/{verdict.call_id}"
        assert record.verdict == verdict
        sent = [r for r in requests if r.prompt == record.prompt]
        assert sent, "the audited prompt is, byte for byte, what the provider received"
        assert presented_ids(record.prompt) == tuple(verdict.presented)
        (answer,) = responder.answers_for(verdict.presented)
        if index == 0:
            assert len(sent) == 2
            assert record.raw_answer == RAW_TEXT_SEPARATOR.join([unreadable, answer.text])
        else:
            assert len(sent) == 1
            assert record.raw_answer == answer.text


async def test_a_judge_the_server_cannot_build_is_refused_with_field_violations(
    fake_llm, tmp_path, start_server
):
    # Endpoints but no keys (the environment's keys are cleared for every e2e test): only the
    # OpenAI-compatible server, which needs none, can be used.
    config = tmp_path / "no-keys.json"
    config.write_text(
        json.dumps({"providers": {f: {"base_url": fake_llm.base_url(f)} for f in FLAVORS}})
    )
    spec = graded_spec(graded_pool(6), ("openai-compatible", "anthropic"))
    spec.judges[0].parameters.options["colour"] = "blue"
    async with grpc.aio.insecure_channel(await start_server(config)) as channel:
        stub = rank_pb2_grpc.RankServiceStub(channel)
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await stub.CreateJob(rank_pb2.CreateJobRequest(spec=spec))
        listed = await stub.ListJobs(rank_pb2.ListJobsRequest())

    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    status = rpc_status.from_call(refused.value)
    violations = {}
    for detail in status.details:
        bad_request = error_details_pb2.BadRequest()
        if detail.Unpack(bad_request):
            violations.update({v.field: v.description for v in bad_request.field_violations})
    assert "unknown option" in violations["spec.judges[0].parameters.options.colour"]
    assert "ANTHROPIC_API_KEY" in violations["spec.judges[1].provider"]
    assert not listed.jobs, "a refused job stores nothing"
