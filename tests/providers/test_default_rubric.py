"""A job without a rubric is judged by the default definition of relevance, never by an empty
`Rubric:` line (issue 13, item 12)."""

from __future__ import annotations

from conftest import StartServer
from fakes import FakeLLMServer, rank_by_score
from job_helpers import completed, llm_judge, run_job, scored_spec

from tierank.evaluation.rubric import DEFAULT_RUBRIC
from tierank.v1 import rank_pb2


async def test_an_empty_rubric_prompts_with_the_default_definition_of_relevance(
    fake_llm: FakeLLMServer, judged_server: StartServer
) -> None:
    fake_llm.respond_with("anthropic", rank_by_score)
    stub = await judged_server()
    events = await run_job(stub, scored_spec(4, [llm_judge("anthropic")], rubric="  "))

    assert completed(events).reason == rank_pb2.COMPLETION_REASON_SETTLED
    prompts = [request.prompt for request in fake_llm.requests("anthropic")]
    assert prompts
    for prompt in prompts:
        assert f"Rubric: {DEFAULT_RUBRIC}\n" in prompt
        assert "Rubric: \n" not in prompt
