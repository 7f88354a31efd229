"""Prompt caching (issue 24 item 3) through the real SDKs against fakes that cache as each
vendor does: the prompt's stable part comes first, Anthropic's is marked only when the model
can cache it, and cached tokens are reported, charged at their price and settled."""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator, Callable
from dataclasses import replace

import grpc
import pytest
from fakes import MODELS, Answer, FakeLLMServer, rank_by_score, settings_for
from job_helpers import completed, llm_judge, run_job, scored_spec, tierank, verdicts

from tierank.server.judges.base import BatchRequest, Judge, JudgeConfig, Passage, PoolContext
from tierank.server.judges.graders import GradeRequest
from tierank.server.judges.parse import Unreadable, parse_ranking
from tierank.server.judges.prices import DEFAULT_PRICES, Price
from tierank.server.judges.prompt import AnswerFormat, render_prompt_parts, upper_bound_tokens
from tierank.server.judges.registry import JudgeFactory
from tierank.v1 import admin_pb2, admin_pb2_grpc, rank_pb2

QUERY = "which passage scores highest"
# Nearly the longest rubric a job may have (16 KiB): with the instructions about 4,180 tokens at
# 4 characters a token, past every model's minimum in the fakes (OpenAI 1,024, Gemini 2.5
# 2,048, Claude Haiku 4.5 4,096).
LONG_RUBRIC = "A passage is relevant when it states its score plainly. " * 292
# About 1,400 tokens: past Claude Sonnet 4.6's minimum (1,024), short of Haiku 4.5's (4,096).
MIDDLE_RUBRIC = "A passage is relevant when it states its score plainly. " * 100
PASSAGES = tuple(Passage(f"p{n}", f"passage p{n} has score {n}.") for n in range(4))

MakeJudge = Callable[[str, str, str], Judge]


@pytest.fixture
async def make_judge(fake_llm: FakeLLMServer) -> AsyncIterator[MakeJudge]:
    factory = JudgeFactory(settings_for(fake_llm))

    def make(flavor: str, model: str, rubric: str) -> Judge:
        pool = PoolContext(query=QUERY, rubric=rubric, passages=PASSAGES)
        return factory.build(JudgeConfig(provider=flavor, model=model), pool)

    yield make
    await factory.aclose()


def request(rubric: str, passages: tuple[Passage, ...] = PASSAGES) -> BatchRequest:
    return BatchRequest(call_id="c", query=QUERY, rubric=rubric, passages=passages)


@pytest.mark.parametrize(
    ("model", "rubric", "marked"),
    [
        ("claude-haiku-4-5", "Relevant if it states a score.", False),
        ("claude-sonnet-4-6", "Relevant if it states a score.", False),
        ("claude-haiku-4-5", MIDDLE_RUBRIC, False),
        ("claude-sonnet-4-6", MIDDLE_RUBRIC, True),
        ("claude-haiku-4-5", LONG_RUBRIC, True),
    ],
)
async def test_anthropic_marks_the_stable_block_only_when_the_model_can_cache_it(
    fake_llm: FakeLLMServer, make_judge: MakeJudge, model: str, rubric: str, marked: bool
) -> None:
    fake_llm.respond_with("anthropic", rank_by_score)
    reply = await make_judge("anthropic", model, rubric).judge(request(rubric))
    assert reply.ordering == ("p3", "p2", "p1", "p0")

    (sent,) = fake_llm.requests("anthropic")
    stable, varying = sent.body["messages"][0]["content"]
    # The stable block holds the instructions, rubric, query and the form of the answer, and
    # nothing of the passages; the passages follow in the second block, never marked.
    assert rubric.strip() in stable["text"] and QUERY in stable["text"]
    assert "Answer with the ranking only" in stable["text"]
    assert "passage p" not in stable["text"] and "passage p3 has score 3." in varying["text"]
    assert ("cache_control" in stable) is marked
    assert "cache_control" not in varying
    if marked:
        assert stable["cache_control"] == {"type": "ephemeral"}


async def test_the_stable_part_is_the_same_text_for_every_batch_of_a_query(
    fake_llm: FakeLLMServer, make_judge: MakeJudge
) -> None:
    """Other passages, another number of them: the same first block to the character."""
    fake_llm.respond_with("anthropic", rank_by_score)
    judge = make_judge("anthropic", "claude-sonnet-4-6", MIDDLE_RUBRIC)
    await judge.judge(request(MIDDLE_RUBRIC))
    await judge.judge(request(MIDDLE_RUBRIC, PASSAGES[:2]))
    first, second = (r.body["messages"][0]["content"] for r in fake_llm.requests("anthropic"))
    assert first[0] == second[0]
    assert first[1] != second[1]


async def test_the_reservation_covers_cache_writes_at_their_price(
    fake_llm: FakeLLMServer,
) -> None:
    """Anthropic charges a write 1.25x the input price: a call that may write reserves that."""
    price = Price(input=1.0, cached_input=0.1, output=5.0, cache_write=1.25)
    settings = replace(
        settings_for(fake_llm),
        prices={"anthropic/claude-haiku-4-5": price, "anthropic/claude-sonnet-4-6": price},
    )
    factory = JudgeFactory(settings)
    pool = PoolContext(query=QUERY, rubric=MIDDLE_RUBRIC, passages=PASSAGES)
    try:
        # The same prompt and price; Sonnet 4.6 marks it (1,024), Haiku 4.5 does not (4,096).
        marks, does_not = (
            factory.build(JudgeConfig(provider="anthropic", model=model), pool).estimate(
                request(MIDDLE_RUBRIC)
            )
            for model in ("claude-sonnet-4-6", "claude-haiku-4-5")
        )
    finally:
        await factory.aclose()
    assert marks.input_tokens == does_not.input_tokens
    stable = render_prompt_parts(QUERY, MIDDLE_RUBRIC, PASSAGES, AnswerFormat.TEXT).stable
    # Both requests of the exchange (the prompt, the corrective follow-up) may write it.
    premium = 2 * upper_bound_tokens(stable) * (price.cache_write - price.input) / 1e6
    assert marks.cost_usd - does_not.cost_usd == pytest.approx(premium)


def expected_cost(usage: rank_pb2.Usage, price: Price) -> float:
    """What the price table charges for the usage: each part of the input at its own price."""
    write_price = price.input if price.cache_write is None else price.cache_write
    uncached = usage.input_tokens - usage.cached_input_tokens - usage.cache_write_input_tokens
    return (
        uncached * price.input
        + usage.cached_input_tokens * price.cached_input
        + usage.cache_write_input_tokens * write_price
        + usage.output_tokens * price.output
    ) / 1e6


@pytest.mark.parametrize("flavor", ["openai", "anthropic", "gemini"])
async def test_a_job_is_charged_less_with_cached_prompts_by_what_the_price_table_says(
    flavor: str, fake_llm: FakeLLMServer, judged_address
) -> None:
    fake_llm.respond_with(flavor, rank_by_score)
    address = await judged_address()
    price = DEFAULT_PRICES[f"{flavor}/{MODELS[flavor]}"]
    judges = [llm_judge(flavor, MODELS[flavor])]
    async with grpc.aio.insecure_channel(address) as channel:
        from tierank.v1 import rank_pb2_grpc

        stub = rank_pb2_grpc.RankServiceStub(channel)
        # The same job twice, once without the provider's cache and once with it. The rubrics
        # differ in one letter, so both jobs pay for every call (no verdict cache) with the same
        # token counts.
        plain_spec = scored_spec(12, judges, query=QUERY, rubric=LONG_RUBRIC.replace("A ", "B ", 1))
        plain = completed(await run_job(stub, plain_spec))
        fake_llm.cache_prompts(flavor)
        events = await run_job(stub, scored_spec(12, judges, query=QUERY, rubric=LONG_RUBRIC))
        cached = completed(events)

        answered = [v for v in verdicts(events) if not v.cached]
        assert len(answered) >= 3
        first, *later = answered
        # The first call finds nothing cached (Anthropic writes its stable part then); every
        # later call of the query has its stable part served from the cache.
        assert first.usage.cached_input_tokens == 0
        assert all(v.usage.cached_input_tokens > 0 for v in later)
        writes = [v.usage.cache_write_input_tokens for v in answered]
        if flavor == "anthropic":
            assert writes[0] > 0 and not any(writes[1:])
            assert all(v.usage.cached_input_tokens == writes[0] for v in later)
        else:
            assert not any(writes)
        for verdict in answered:
            assert verdict.usage.cost_usd == pytest.approx(expected_cost(verdict.usage, price))

        stats = cached.stats
        assert stats.judge_calls == plain.stats.judge_calls
        assert stats.input_tokens == plain.stats.input_tokens
        assert stats.cached_input_tokens == sum(v.usage.cached_input_tokens for v in answered)
        assert stats.cache_write_input_tokens == sum(writes)
        assert plain.stats.cached_input_tokens == plain.stats.cache_write_input_tokens == 0
        saved = (
            stats.cached_input_tokens * (price.input - price.cached_input)
            - stats.cache_write_input_tokens * ((price.cache_write or price.input) - price.input)
        ) / 1e6
        assert saved > 0
        assert plain.stats.cost_usd - stats.cost_usd == pytest.approx(saved)

        # The tenant's usage settles what each call cost, cached prompts at their price.
        admin = admin_pb2_grpc.AdminServiceStub(channel)
        usage = await admin.GetUsage(admin_pb2.GetUsageRequest())
        assert sum(s.cost_usd for s in usage.total) == pytest.approx(
            plain.stats.cost_usd + stats.cost_usd
        )
        assert usage.reserved.cost_usd == 0


async def test_the_command_line_shows_the_tokens_read_from_and_written_to_the_cache(
    fake_llm: FakeLLMServer, judged_address, tmp_path
) -> None:
    fake_llm.respond_with("anthropic", rank_by_score)
    fake_llm.cache_prompts("anthropic")
    address = await judged_address()
    pool = tmp_path / "pool.jsonl"
    pool.write_text(
        "".join(
            json.dumps({"id": f"c{i:03d}", "text": f"passage c{i:03d} has score {12 - i}."}) + "\n"
            for i in range(12)
        )
    )
    rubric = tmp_path / "rubric.txt"
    rubric.write_text(LONG_RUBRIC)
    common = ("--query", QUERY, "--rubric", f"@{rubric}", "--judge", "anthropic:claude-haiku-4-5")
    table = await tierank("rank", str(pool), *common, "--k", "4", "--server", address)
    assert table.returncode == 0, table.stderr
    read = re.search(r"\(prompt cache: (\d+) read, (\d+) written\)", table.stdout)
    assert read is not None, table.stdout
    written = int(read.group(2))
    assert int(read.group(1)) > 0 and written > 0
    # Every call after the first read what the first one wrote.
    calls = int(re.search(r"(\d+) judge calls", table.stdout).group(1))  # type: ignore[union-attr]
    assert int(read.group(1)) == (calls - 1) * written

    # Another job of the query (other batches: no verdict is reused) within the cache's
    # lifetime reads the same prefix on every call, and JSON output carries the counts.
    as_json = await tierank(
        "rank", str(pool), *common, "--k", "3", "--format", "json", "--server", address
    )
    assert as_json.returncode == 0, as_json.stderr
    stats = json.loads(as_json.stdout)["stats"]
    assert int(stats["cached_input_tokens"]) == int(stats["judge_calls"]) * written
    assert int(stats.get("cache_write_input_tokens", 0)) == 0


async def test_a_pointwise_grade_marks_what_comes_before_the_passage(
    fake_llm: FakeLLMServer,
) -> None:
    """Grading many passages of one query repeats the scale, rubric and query: the same
    stable block, cached from the second grade on."""
    fake_llm.respond_with("anthropic", lambda request: Answer("##final score: 2"))
    fake_llm.cache_prompts("anthropic")
    factory = JudgeFactory(settings_for(fake_llm))
    try:
        grader = factory.build_grader(JudgeConfig(provider="anthropic", model="claude-sonnet-4-6"))
        replies = [
            await grader.grade(GradeRequest(QUERY, MIDDLE_RUBRIC, passage))
            for passage in PASSAGES[:3]
        ]
    finally:
        await factory.aclose()
    assert [reply.grade for reply in replies] == [2, 2, 2]
    blocks = [r.body["messages"][0]["content"] for r in fake_llm.requests("anthropic")]
    assert all(b[0] == blocks[0][0] for b in blocks)
    assert blocks[0][0]["cache_control"] == {"type": "ephemeral"}
    assert QUERY in blocks[0][0]["text"] and "passage p0" not in blocks[0][0]["text"]
    assert "passage p0 has score 0." in blocks[0][1]["text"]
    written = replies[0].usage.cache_write_input_tokens
    assert written > 0 and replies[0].usage.cached_input_tokens == 0
    assert [r.usage.cached_input_tokens for r in replies[1:]] == [written, written]


@pytest.mark.parametrize("answer_format", list(AnswerFormat))
def test_an_echo_of_the_stable_parts_instruction_is_not_a_ranking(
    answer_format: AnswerFormat,
) -> None:
    """The stable part states the form of the answer without the batch's size: a model that
    repeats that sentence has named no passage."""
    stable = render_prompt_parts(QUERY, "", PASSAGES, answer_format).stable
    instruction = stable.strip().splitlines()[-1]
    assert instruction.startswith("Answer with")
    assert isinstance(parse_ranking(instruction, k=len(PASSAGES)), Unreadable)
