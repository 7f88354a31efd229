"""A daily token budget against real SDK calls to a fake provider: 20 concurrent jobs of one
tenant, a budget for about 5 of them; what the provider counted never exceeds the budget."""

from __future__ import annotations

import asyncio

from keyed import FLAVOR, MODELS, llm_spec

from tierank.client import candidate, judge
from tierank.v1 import admin_pb2, eval_pb2, rank_pb2


def spec(seed: int) -> rank_pb2.JobSpec:
    return llm_spec(12, seed=seed)


async def run(session, job_spec_: rank_pb2.JobSpec) -> list[rank_pb2.JobEvent]:
    job = await session.rank.CreateJob(
        rank_pb2.CreateJobRequest(spec=job_spec_), metadata=session.metadata
    )
    return [
        e
        async for e in session.rank.WatchJob(
            rank_pb2.WatchJobRequest(name=job.name), metadata=session.metadata
        )
    ]


async def test_twenty_concurrent_jobs_never_overshoot_the_daily_token_budget(llm_server, fake_llm):
    from graded_fakes import answer_by_grade

    responder = answer_by_grade(fake_llm, [FLAVOR])[FLAVOR]
    probe = llm_server.session(await llm_server.member_key("probe"))
    await run(probe, spec(0))
    one_job = sum(a.answer.input_tokens for a in responder.answered)
    spent_before = len(responder.answered)
    budget = 5 * one_job

    team = llm_server.session(await llm_server.member_key("team", daily_input_tokens=budget))
    other = llm_server.session(await llm_server.member_key("other"))
    finals = await asyncio.gather(*(run(team, spec(seed)) for seed in range(1, 21)))

    charged = sum(a.answer.input_tokens for a in responder.answered[spent_before:])
    assert 0 < charged <= budget
    reasons = [events[-1].completed.reason for events in finals]
    assert reasons.count(rank_pb2.COMPLETION_REASON_BUDGET_EXHAUSTED) >= 10
    usage = await team.admin.GetUsage(admin_pb2.GetUsageRequest(), metadata=team.metadata)
    # Calls abandoned mid-flight when the budget ran out count at their reservation (the
    # provider may have charged them): recorded spend covers what was charged, within budget.
    assert charged <= sum(s.input_tokens for s in usage.today) <= budget
    assert usage.reserved.input_tokens == 0
    # Another tenant is unaffected by team's exhausted budget.
    events = await run(other, spec(30))
    assert events[-1].completed.reason != rank_pb2.COMPLETION_REASON_BUDGET_EXHAUSTED


async def test_a_pointwise_grade_cached_for_one_tenant_is_not_cached_for_another(
    llm_server, fake_llm
):
    from fakes import Answer

    fake_llm.respond_with(FLAVOR, lambda request: Answer(text='{"grade": 2}'))
    alice = llm_server.session(await llm_server.member_key("team-a"))
    bob = llm_server.session(await llm_server.member_key("team-b"))
    request = eval_pb2.GradePairsRequest(
        judge=judge(f"{FLAVOR}:{MODELS[FLAVOR]}"),
        pairs=[
            eval_pb2.GradePair(query_id="q1", query="bees", passage=candidate("d1", "bees dance"))
        ],
    )
    first = await alice.eval.GradePairs(request, metadata=alice.metadata)
    again = await alice.eval.GradePairs(request, metadata=alice.metadata)
    theirs = await bob.eval.GradePairs(request, metadata=bob.metadata)
    assert not first.grades[0].cached and again.grades[0].cached
    assert not theirs.grades[0].cached
