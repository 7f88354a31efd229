"""Pointwise grading through gRPC: the offline oracle, anchoring tiers, and LLM providers
through their real SDKs against the fake HTTP server, with the verdict cache."""

from __future__ import annotations

import json
import re

import grpc
import pytest
from fakes import Answer, Recorded

from tierank.server.judges.parse import Unreadable
from tierank.server.judges.pointwise import POINTWISE_TEMPLATE_VERSION, parse_grade
from tierank.v1 import eval_pb2, eval_pb2_grpc, rank_pb2


def pairs(grades: list[int]) -> list[eval_pb2.GradePair]:
    return [
        eval_pb2.GradePair(
            query_id="q1",
            query="why is the sky blue",
            passage=rank_pb2.Candidate(
                id=f"d{i}", text=f"passage {i} with grade {g}", metadata={"score": str(g)}
            ),
        )
        for i, g in enumerate(grades)
    ]


def oracle(noise: float) -> rank_pb2.JudgeSpec:
    return rank_pb2.JudgeSpec(
        provider="oracle",
        parameters=rank_pb2.JudgeParameters(options={"noise": str(noise)}),
    )


async def test_oracle_grades_are_the_hidden_score_rounded_and_clamped(eval_stub) -> None:
    hidden = [0, 1, 2, 3, 3, 0]
    exact = await eval_stub.GradePairs(
        eval_pb2.GradePairsRequest(judge=oracle(0.0), pairs=pairs(hidden))
    )
    assert [g.grade for g in exact.grades] == hidden
    assert exact.stats.calls == 6 and exact.stats.cached_calls == 0
    noisy = await eval_stub.GradePairs(
        eval_pb2.GradePairsRequest(judge=oracle(2.0), pairs=pairs(hidden * 5), seed=3)
    )
    values = [g.grade for g in noisy.grades]
    assert all(0 <= v <= 3 for v in values)
    assert values != hidden * 5  # noise of 2 grades moves some of 30 grades


async def test_anchoring_grades_tiers_with_few_calls(
    eval_stub, run_job, make_spec, oracle_judge
) -> None:
    # One batch of all 20 with a noise-free oracle: the tiers are the hidden order exactly.
    spec = make_spec(n=20, judges=[oracle_judge(noise=0.0)], batch_size=20)
    # Hidden grade 3 for the best 3, 2 for the next 5, 1 for 5, 0 for the rest.
    for i, candidate in enumerate(spec.candidates):
        candidate.metadata["grade"] = str(3 if i < 3 else 2 if i < 8 else 1 if i < 13 else 0)
    job = await run_job(spec)
    assert [t.candidate_ids[0] for t in job.tiers] == [f"c{i:03d}" for i in range(20)]
    judge = rank_pb2.JudgeSpec(
        provider="oracle",
        parameters=rank_pb2.JudgeParameters(options={"noise": "0", "score_key": "grade"}),
    )
    response = await eval_stub.ExportQrels(
        eval_pb2.ExportQrelsRequest(
            tiers=eval_pb2.TierLabels(
                jobs=[eval_pb2.JobTiers(job=job.name, query_id="q")],
                mapping=eval_pb2.TierMapping(
                    pointwise=eval_pb2.PointwiseAnchoring(judge=judge, seed=1)
                ),
            )
        )
    )
    grades = {line.split()[2]: int(line.split()[3]) for line in response.qrels.splitlines()}
    expected = {c.id: int(c.metadata["grade"]) for c in spec.candidates}
    assert grades == expected
    (report,) = response.labeling
    # Three boundaries among 20 tiers: about 3 · log2(20) calls, fewer than one per tier.
    assert report.judge_calls <= 14
    assert report.non_monotone == 0


def grade_from_prompt(recorded: Recorded) -> int:
    """The fake model's answer: the grade written into the passage text."""
    return int(re.search(r"grade (\d)", recorded.prompt).group(1))


async def test_llm_grading_through_the_sdks_with_the_verdict_cache(
    llm_server_address, fake_llm
) -> None:
    fake_llm.respond_with("openai", lambda r: Answer(json.dumps({"grade": grade_from_prompt(r)})))
    fake_llm.respond_with(
        "anthropic", lambda r: Answer(f"M=2, T=1\n##final score: {grade_from_prompt(r)}")
    )
    hidden = [2, 0, 3, 1]
    async with grpc.aio.insecure_channel(llm_server_address) as channel:
        stub = eval_pb2_grpc.EvalServiceStub(channel)
        for provider, model in (("openai", "gpt-4.1-mini"), ("anthropic", "claude-haiku-4-5")):
            request = eval_pb2.GradePairsRequest(
                judge=rank_pb2.JudgeSpec(provider=provider, model=model),
                pairs=pairs(hidden),
                rubric="relevant if it explains the colour",
            )
            first = await stub.GradePairs(request)
            assert [g.grade for g in first.grades] == hidden
            assert first.stats.calls == 4 and first.stats.cached_calls == 0
            assert first.stats.usage.input_tokens == 4 * 120
            again = await stub.GradePairs(request)
            assert [g.grade for g in again.grades] == hidden
            assert again.stats.cached_calls == 4 and again.stats.usage.input_tokens == 0
    openai_requests = fake_llm.requests("openai")
    assert len(openai_requests) == 4  # the second round came from the cache
    schema = openai_requests[0].body["response_format"]["json_schema"]
    assert schema["name"] == "grade"
    assert "0 to 3" in openai_requests[0].prompt
    assert "explains the colour" in openai_requests[0].prompt
    assert len(fake_llm.requests("anthropic")) == 4


async def test_unreadable_grade_gets_one_corrective_follow_up(llm_server_address, fake_llm) -> None:
    fake_llm.script("openai", Answer("I think it is quite relevant."), Answer('{"grade": 2}'))
    async with grpc.aio.insecure_channel(llm_server_address) as channel:
        response = await eval_pb2_grpc.EvalServiceStub(channel).GradePairs(
            eval_pb2.GradePairsRequest(
                judge=rank_pb2.JudgeSpec(provider="openai", model="gpt-4.1-mini"),
                pairs=pairs([1]),
            )
        )
    assert [g.grade for g in response.grades] == [2]
    follow_up = fake_llm.requests("openai")[1]
    assert [role for role, _ in follow_up.messages] == ["user", "assistant", "user"]


async def test_fill_qrels_grades_only_the_holes(eval_stub) -> None:
    qrels = "1 0 a 2\n1 0 b 0\n"
    run = "".join(f"1 Q0 {d} {r} {10 - r} sys\n" for r, d in enumerate("abcd", start=1))
    passages = "".join(
        json.dumps({"id": d, "text": f"text {d}", "metadata": {"score": s}}) + "\n"
        for d, s in zip("abcd", (2, 0, 3, 1), strict=True)
    )
    response = await eval_stub.FillQrels(
        eval_pb2.FillQrelsRequest(
            qrels=eval_pb2.TextFile(name="q.txt", content=qrels),
            runs=[eval_pb2.TextFile(name="r.trec", content=run)],
            depth=3,
            topics=eval_pb2.TextFile(name="t.tsv", content="1\twhat is it\n"),
            passages=eval_pb2.TextFile(name="p.jsonl", content=passages),
            judge=oracle(0.0),
        )
    )
    assert [(g.doc_id, g.grade) for g in response.added] == [("c", 3)]
    assert response.qrels == qrels + "1 0 c 3\n"


@pytest.mark.parametrize(
    ("answer", "grade"),
    [
        ('{"grade": 3}', 3),
        ('```json\n{"grade": 1}\n```', 1),
        ("Intent matches.\n**Final score:** 2", 2),
        ("##final score: 0", 0),
        (" 2 ", 2),
        ("##final score: 4", None),
        ("final score: 1 ... final score: 2", None),
        ('{"score": 2}', None),
        ("very relevant", None),
    ],
)
def test_grade_parser_is_strict(answer: str, grade: int | None) -> None:
    parsed = parse_grade(answer)
    if grade is None:
        assert isinstance(parsed, Unreadable)
    else:
        assert parsed.value == grade


def test_prompt_version_names_the_scale() -> None:
    assert "0-3" in POINTWISE_TEMPLATE_VERSION
