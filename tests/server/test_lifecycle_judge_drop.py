"""A judge leaves a job only after MAX_CONSECUTIVE_FAILURES failures in a row: a call refused by
its provider's open circuit breaker is one failure, not a drop."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import grpc
import pytest

# The fake providers live with the provider and end-to-end tests.
sys.path.insert(0, str(Path(__file__).parents[1] / "providers"))
sys.path.insert(0, str(Path(__file__).parents[1] / "e2e"))

from fakes import HttpError
from graded_fakes import (
    FAKE_MODEL_PRICES,
    MODELS,
    PROVIDER_ENV,
    FakeLLMThread,
    answer_by_grade,
    best_first,
    graded_pool,
    judges_config,
)

from tierank.client import candidate, job_spec, judge
from tierank.server.app import background_server
from tierank.server.settings import ServerSettings
from tierank.v1 import rank_pb2, rank_pb2_grpc


async def test_a_call_refused_by_an_open_breaker_does_not_drop_the_judge(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    for name in PROVIDER_ENV:
        monkeypatch.delenv(name, raising=False)
    with FakeLLMThread() as fake:
        # Each plan is one batch for both judges and lasts as long as the slow gemini answer
        # (0.4 s). The first openai answer is a 500, which opens openai's breaker for 0.6 s:
        # the second plan's openai call is refused by it, the third goes through again.
        answer_by_grade(fake, ("openai",))
        answer_by_grade(fake, ("gemini",), latency_s=0.4)
        fake.script("openai", HttpError(500))
        config = judges_config(
            fake,
            prices=FAKE_MODEL_PRICES,
            max_attempts=1,
            breaker={"openai": {"failure_threshold": 1, "cooldown_s": 0.6}},
        )
        config_path = tmp_path / "judges.json"
        config_path.write_text(json.dumps(config))
        pool = graded_pool(12, seed=5, words=8)
        spec = job_spec(
            "which passage has the highest grade",
            [candidate(c.id, c.text) for c in pool],
            judges=[judge(f"{flavor}:{MODELS[flavor]}") for flavor in ("openai", "gemini")],
            rubric="a passage is better the higher its grade",
            batch_size=4,
            max_in_flight=2,
            ensemble="all",
        )
        settings = ServerSettings(
            listen="127.0.0.1:0", db=tmp_path / "tierank.db", judges_config=config_path
        )
        async with (
            background_server(settings) as address,
            grpc.aio.insecure_channel(address) as channel,
        ):
            stub = rank_pb2_grpc.RankServiceStub(channel)
            events = [e async for e in stub.Rank(rank_pb2.RankRequest(spec=spec), timeout=60)]

    openai_verdicts = [
        e.verdict for e in events if e.HasField("verdict") and e.verdict.judge.startswith("openai")
    ]
    reasons = [v.failure_reason.split(":")[0] for v in openai_verdicts[:2]]
    assert reasons == ["server_error", "unavailable"], "the breaker opened, then refused a call"
    assert openai_verdicts[2:] and all(not v.failed for v in openai_verdicts[2:]), "kept asking"
    completed = events[-1].completed
    assert completed.reason == rank_pb2.COMPLETION_REASON_SETTLED
    assert [c for tier in completed.tiers for c in tier.candidate_ids] == best_first(pool)
