"""Rubric presets over gRPC: listed by ListRubrics, resolved at the API edge into their text
(stored, prompted and cached as text), refused by name when unknown, and versioned so that a
new version never reuses a verdict cached under another."""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import replace

import grpc
import pytest
from fakes import Answer, Recorded, rank_by_score
from google.rpc import error_details_pb2
from grpc_status import rpc_status

from tierank.limits import MAX_RUBRIC_BYTES
from tierank.server.errors import InvalidInput
from tierank.server.judges import rubric_presets
from tierank.server.judges.base import Passage
from tierank.server.judges.rubric_presets import (
    LISTWISE,
    POINTWISE,
    PRESETS,
    current_presets,
    resolve_rubric,
)
from tierank.server.judges.verdict_cache import cache_key
from tierank.v1 import eval_pb2, eval_pb2_grpc, rank_pb2, rank_pb2_grpc

# sha256 of every released text. A released text is never edited: the verdict cache and
# `preset:NAME@VERSION` reproduce evaluations made with it. Change a text by adding a version.
RELEASED_TEXTS = {
    ("context-relevance", 1): "b158ed2e18c88d735f00aa12eb079554ad0678a583fac4389fdc0f34610a74c9",
    ("answer-usefulness", 1): "e14e82c392dbf889f1d95841cc95b0fd23bfbf9ebc6d0866854244df11653fec",
    ("answer-relevance", 1): "ffddad1802b874e9913855fdbdcc9099fcebae8aa19312078c0b230371e8dd46",
    ("groundedness", 1): "9a400d70987cae53fd8d84a9750fe3f1e3a1ecf6e230c9922e7f5f5311912c7e",
}


def sha256(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def test_released_texts_are_never_edited() -> None:
    released = {(p.name, p.version): sha256(p.text) for v in PRESETS.values() for p in v.values()}
    assert released == RELEASED_TEXTS


def test_every_version_has_its_own_text_so_its_own_cache_keys() -> None:
    released = [p for versions in PRESETS.values() for p in versions.values()]
    keys = {
        cache_key("tenant", "openai/gpt-4.1-mini", p.text, "q", [Passage("d", "text")])
        for p in released
    }
    assert len(keys) == len(released)
    for preset in released:
        assert len(preset.text.encode()) <= MAX_RUBRIC_BYTES
        assert preset.kind in (LISTWISE, POINTWISE)


@pytest.mark.parametrize("preset", [p for p in current_presets() if p.kind == POINTWISE])
def test_pointwise_presets_define_every_grade(preset: rubric_presets.Preset) -> None:
    assert [int(g) for g in re.findall(r"\b([0-3]) = ", preset.text)] == [3, 2, 1, 0]


def test_resolution_keeps_a_rubric_of_its_own_and_names_the_version() -> None:
    assert resolve_rubric("rubric", "relevant if it cites a CVE", LISTWISE) == (
        "relevant if it cites a CVE",
        "",
    )
    text, label = resolve_rubric("rubric", " preset:groundedness@1\n", LISTWISE)
    assert (text, label) == (PRESETS["groundedness"][1].text, "groundedness@1")


async def test_list_rubrics_lists_the_current_version_of_each(eval_stub) -> None:
    listed = (await eval_stub.ListRubrics(eval_pb2.ListRubricsRequest())).presets
    assert [(p.name, p.version, p.kind) for p in listed] == [
        ("context-relevance", 1, "listwise"),
        ("answer-usefulness", 1, "listwise"),
        ("answer-relevance", 1, "pointwise"),
        ("groundedness", 1, "pointwise"),
    ]
    assert all(p.description and p.text == PRESETS[p.name][p.version].text for p in listed)


def job_spec(make_spec, rubric: str, **fields: object) -> rank_pb2.JobSpec:
    spec = make_spec(n=4, **fields)
    spec.rubric = rubric
    return spec


@pytest.mark.parametrize("reference", ["preset:context-relevance", "preset:groundedness@1"])
async def test_a_job_holds_the_preset_text_not_its_name(stub, make_spec, reference) -> None:
    # A pointwise preset ranks too: e.g. several generated answers by their groundedness.
    job = await stub.CreateJob(
        rank_pb2.CreateJobRequest(spec=job_spec(make_spec, reference), view=rank_pb2.JOB_VIEW_FULL)
    )
    name = reference.removeprefix("preset:").partition("@")[0]
    assert job.spec.rubric == PRESETS[name][1].text


def field_violations(error: grpc.aio.AioRpcError) -> list[tuple[str, str]]:
    status = rpc_status.from_call(error)
    assert status is not None
    bad_request = error_details_pb2.BadRequest()
    for detail in status.details:
        if detail.Unpack(bad_request):
            return [(v.field, v.description) for v in bad_request.field_violations]
    return []


@pytest.mark.parametrize(
    ("reference", "rule"),
    [
        ("preset:context-relevence", "unknown rubric preset 'context-relevence'; presets: "),
        ("preset:groundedness@7", "preset 'groundedness' has no version 7; it has: 1"),
        ("preset:Context Relevance", "is not a preset reference"),
        ("preset:groundedness@0", "is not a preset reference"),
    ],
)
async def test_an_unknown_preset_is_refused_naming_the_field(
    stub, eval_stub, make_spec, reference: str, rule: str
) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as job_error:
        # Reported with every other rule the spec breaks.
        await stub.CreateJob(
            rank_pb2.CreateJobRequest(spec=job_spec(make_spec, reference, top_k=9))
        )
    assert job_error.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    violations = field_violations(job_error.value)
    assert [f for f, _ in violations] == ["spec.rubric", "spec.top_k"]
    assert rule in violations[0][1]

    grade = eval_pb2.GradePairsRequest(
        judge=rank_pb2.JudgeSpec(provider="oracle"),
        pairs=[
            eval_pb2.GradePair(
                query_id="q", query="q", passage=rank_pb2.Candidate(id="d", text="t")
            )
        ],
        rubric=reference,
    )
    with pytest.raises(grpc.aio.AioRpcError) as grade_error:
        await eval_stub.GradePairs(grade)
    ((field, description),) = field_violations(grade_error.value)
    assert field == "rubric" and rule in description


def test_the_field_kind_lists_its_own_presets_first() -> None:
    for kind, first in ((LISTWISE, "context-relevance"), (POINTWISE, "answer-relevance")):
        with pytest.raises(InvalidInput) as error:
            resolve_rubric("rubric", "preset:nope", kind)
        assert f"presets: {first}," in str(error.value)


@pytest.fixture
def second_version(monkeypatch: pytest.MonkeyPatch) -> rubric_presets.Preset:
    """A version 2 of context-relevance, released for this test only (what a reworded preset
    would be): the bare name now means it, and @1 still means the original."""
    first = PRESETS["context-relevance"][1]
    second = replace(first, version=2, text=first.text + " Prefer primary sources.")
    monkeypatch.setitem(PRESETS["context-relevance"], 2, second)
    return second


def grade_in(recorded: Recorded) -> int:
    return int(re.search(r"grade (\d)", recorded.prompt).group(1))


async def test_grading_caches_per_preset_version(
    llm_server_address, fake_llm, second_version
) -> None:
    fake_llm.respond_with("openai", lambda r: Answer(json.dumps({"grade": grade_in(r)})))
    pairs = [
        eval_pb2.GradePair(
            query_id="q1",
            query="why is the sky blue",
            passage=rank_pb2.Candidate(id=f"d{g}", text=f"passage with grade {g}"),
        )
        for g in (0, 1, 2, 3)
    ]
    judge = rank_pb2.JudgeSpec(provider="openai", model="gpt-4.1-mini")
    async with grpc.aio.insecure_channel(llm_server_address) as channel:
        stub = eval_pb2_grpc.EvalServiceStub(channel)

        async def cached_calls(rubric: str) -> int:
            request = eval_pb2.GradePairsRequest(judge=judge, pairs=pairs, rubric=rubric)
            response = await stub.GradePairs(request)
            assert [g.grade for g in response.grades] == [0, 1, 2, 3]
            return response.stats.cached_calls

        assert await cached_calls("preset:context-relevance@1") == 0
        assert await cached_calls("preset:context-relevance@1") == 4
        assert await cached_calls("preset:context-relevance") == 0  # now version 2
        assert await cached_calls("preset:context-relevance@2") == 4
        assert await cached_calls(PRESETS["context-relevance"][1].text) == 4  # the same text
        listed = (await stub.ListRubrics(eval_pb2.ListRubricsRequest())).presets
    assert (listed[0].name, listed[0].version) == ("context-relevance", 2)
    prompts = [r.prompt for r in fake_llm.requests("openai")]
    assert len(prompts) == 8
    first_text = PRESETS["context-relevance"][1].text
    assert all(first_text in p and "preset:" not in p for p in prompts)
    assert sum(second_version.text in p for p in prompts) == 4


async def test_ranking_jobs_cache_per_preset_version(
    llm_server_address, fake_llm, second_version
) -> None:
    fake_llm.respond_with("openai", rank_by_score)
    spec = rank_pb2.JobSpec(
        query="why is the sky blue",
        candidates=[
            rank_pb2.Candidate(id=f"d{s}", text=f"passage about light, score {s}") for s in range(4)
        ],
        judges=[rank_pb2.JudgeSpec(provider="openai", model="gpt-4.1-mini")],
        batch_size=4,
        seed=5,
    )
    async with grpc.aio.insecure_channel(llm_server_address) as channel:
        stub = rank_pb2_grpc.RankServiceStub(channel)

        async def cached(rubric: str) -> list[bool]:
            spec.rubric = rubric
            events = [e async for e in stub.Rank(rank_pb2.RankRequest(spec=spec))]
            verdicts = [e.verdict for e in events if e.HasField("verdict")]
            assert verdicts and all(v.ordering[0] == "d3" for v in verdicts)
            return [v.cached for v in verdicts]

        assert not any(await cached("preset:context-relevance@1"))
        assert all(await cached("preset:context-relevance@1"))
        assert not any(await cached("preset:context-relevance@2"))
        assert all(await cached("preset:context-relevance"))
    assert all("preset:" not in r.prompt for r in fake_llm.requests("openai"))
