"""Which identities are the same judge (server/judges/identity.py, issue 34 item 22)."""

from __future__ import annotations

import json

from tierank.server.judges.identity import judge_key
from tierank.server.judges.prompt import TEMPLATE_VERSION

SERVED = json.dumps([{"id": "/models/qwen.gguf", "owned_by": "me"}])


def identity(**changes: object) -> str:
    fields: dict[str, object] = {
        "provider": "openai-compatible",
        "model": None,
        "temperature": 0.0,
        "max_output_tokens": None,
        "reasoning": None,
        "options": {},
        "answer_format": "text",
        "passage_token_budget": 300,
        "template": TEMPLATE_VERSION,
        "base_url": "http://loopback:8091/v1",
        "served_model": SERVED,
        **changes,
    }
    return json.dumps(fields, sort_keys=True, separators=(",", ":"))


def same(one: str, other: str, label: str = "qwen") -> bool:
    return judge_key(one, label).same_judge(judge_key(other, label))


def test_options_that_do_not_make_another_judge() -> None:
    base = identity()
    for unchanged in (
        identity(temperature=0.0000001),
        identity(temperature=-0.01),
        identity(max_output_tokens=200),
        identity(passage_token_budget=299),
        identity(options={"mode": "batch", "format": "text"}),
        identity(template="listwise-v2", base_url="http://127.0.0.1:8091/v1/", model="label"),
        identity(served_model=json.dumps(json.loads(SERVED), indent=2)),
    ):
        assert same(base, unchanged), unchanged


def test_options_that_do() -> None:
    base = identity()
    for changed in (
        identity(temperature=0.7),
        identity(temperature=None),
        identity(reasoning=True),
        identity(options={"reasoning_effort": "high"}),
        identity(answer_format="json"),
        identity(template="listwise-v1"),
        identity(base_url="http://loopback:8092/v1"),
        identity(served_model=json.dumps([{"id": "/models/llama.gguf"}])),
        identity(provider="openai"),
    ):
        assert not same(base, changed), changed
    differences = judge_key(identity(temperature=0.7), "qwen").differences(judge_key(base, "qwen"))
    assert differences == ["temperature 0.7 (0.0 there)"]


def test_unknown_weights_are_the_model_name_as_asked() -> None:
    unknown = identity(served_model=None, model="qwen")
    assert same(identity(), unknown)
    assert not judge_key(identity(), "other").same_judge(judge_key(unknown, "qwen"))
    assert judge_key(identity(), "qwen").model == "/models/qwen.gguf"


def test_identities_that_are_not_json_are_compared_as_written() -> None:
    assert same("lexical/bm25(k1=0.9,b=0.4)", "lexical/bm25(k1=0.9,b=0.4)")
    assert not same("oracle/score/noise=0.5", "oracle/score/noise=0.6")
    assert not same("oracle/score/noise=0.5", identity())
