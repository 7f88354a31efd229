"""A judge refused by its qualification is the same judge however its server's address is
spelled and whatever label a job gives its model (issue 22 item 13), whether or not its server
can say which weights it serves right now, and whatever options that do not make another judge
it is asked with (issue 34 items 20 to 22)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import grpc
import pytest
from fakes import FakeLLMServer, llama_cpp_python
from job_helpers import llm_judge, scored_spec, tierank
from refused_judges import (
    FLAVOR,
    GGUF,
    busy,
    labelled_files,
    qualified_worst,
    serving,
    worst_first,
    worst_first_or_by_score,
)

from tierank.client._errors import error_from_rpc
from tierank.server.judges.prompt import AnswerFormat
from tierank.server.storage.base import QualificationRecord
from tierank.server.storage.sqlite import SqliteStorage
from tierank.v1 import rank_pb2, rank_pb2_grpc, study_pb2

# Appended, not put first: "conftest" must stay this directory's for the other tests here.
sys.path.append(str(Path(__file__).resolve().parents[1] / "studies"))

from study_calls import Stubs, started_study
from study_data import collection, inputs_request


async def admission(address: str, judge: rank_pb2.JudgeSpec) -> rank_pb2.Job | str:
    """The job created with `judge`, or why it was refused."""
    spec = scored_spec(6, [judge], batch_size=3)
    async with grpc.aio.insecure_channel(address) as channel:
        stub = rank_pb2_grpc.RankServiceStub(channel)
        try:
            return await stub.CreateJob(rank_pb2.CreateJobRequest(spec=spec), timeout=30)
        except grpc.aio.AioRpcError as error:
            assert error.code() == grpc.StatusCode.FAILED_PRECONDITION, error
            info = error_from_rpc(error).error_info
            assert info is not None and info.reason == "JUDGE_NOT_QUALIFIED"
            return error.details() or ""


async def refusal(address: str, label: str, **parameters: Any) -> str:
    """Why a job with the judge `label` was refused ("" when it was admitted)."""
    admitted = await admission(address, llm_judge(FLAVOR, label, **parameters))
    return "" if isinstance(admitted, rank_pb2.Job) else admitted


async def test_a_refused_judge_is_refused_under_every_spelling_and_label(
    fake_llm: FakeLLMServer, tmp_path: Path
) -> None:
    fake_llm.local = llama_cpp_python(GGUF)
    fake_llm.respond_with(FLAVOR, worst_first)
    port = fake_llm.url.rsplit(":", 1)[1]
    files = labelled_files(tmp_path)
    async with serving(tmp_path, f"http://127.0.0.1:{port}/compat/v1") as address:
        qualified = await tierank(
            "qualify", "--judge", f"{FLAVOR}:qwen", *files, "--k", "4", "--server", address
        )
        assert qualified.returncode == 5, qualified.stdout + qualified.stderr
        assert "not usable" in qualified.stdout
        assert await refusal(address, "qwen")

    for spelling in (
        f"http://localhost:{port}/compat/v1",
        f"http://127.0.0.1:{port}/compat/v1/",
        f"HTTP://LocalHost:{port}/compat/v1/",
        f"http://127.0.0.1:{port}/compat/./v1",
        f"http://0.0.0.0:{port}/compat/v1",  # reaches this machine too (issue 34 item 21)
    ):
        async with serving(tmp_path, spelling) as address:
            for label in ("qwen", "another-label", GGUF):
                assert await refusal(address, label), (spelling, label)


async def test_a_qualification_stored_under_the_old_identity_still_counts(
    fake_llm: FakeLLMServer, tmp_path: Path
) -> None:
    """Stored by the release before: the base URL as written, the label, the v2 prompt."""
    fake_llm.local = llama_cpp_python(GGUF)
    fake_llm.respond_with(FLAVOR, worst_first)
    base_url = f"{fake_llm.url}/compat/v1/"
    served = [{"id": GGUF, "owned_by": "me"}]
    old_identity = {
        "provider": FLAVOR,
        "model": "qwen",
        "temperature": None,
        "max_output_tokens": None,
        "reasoning": None,
        "options": {},
        "answer_format": str(AnswerFormat.TEXT),
        "passage_token_budget": 300,
        "template": "listwise-v2",
        "base_url": base_url,
        "served_model": json.dumps(served, sort_keys=True),
    }
    identity = json.dumps(old_identity, sort_keys=True, separators=(",", ":"))
    storage = SqliteStorage(tmp_path / "tierank.db", synchronous="NORMAL")
    try:
        await storage.put_qualification(
            QualificationRecord("01old", "default", identity, 1.0, False, 0.0, b"")
        )
    finally:
        await storage.close()

    async with serving(tmp_path, base_url) as address:
        assert "qualifications/01old" in await refusal(address, "qwen")


async def test_a_refused_judge_stays_refused_while_its_server_is_busy(
    fake_llm: FakeLLMServer, tmp_path: Path
) -> None:
    """Issue 34 item 20: the model list waits for the one slot, so a job created while another
    request runs could not learn which weights answer, and passed as a judge never qualified."""
    fake_llm.local = llama_cpp_python(GGUF)
    fake_llm.respond_with(FLAVOR, worst_first)
    async with serving(tmp_path, fake_llm.base_url(FLAVOR)) as address:
        name = await qualified_worst(fake_llm, address, tmp_path, f"{FLAVOR}:qwen")
        async with busy(fake_llm):
            # Admission waits for the list as long as a call may (here 1 s), then refuses.
            for label in ("qwen", "another-label"):
                why = await refusal(address, label, timeout_seconds=1)
                assert name in why and "could not be read" in why, why
            listings = fake_llm.model_listings
        # Once the server answers, the judge is known by its weights again, and refused so.
        why = await refusal(address, "another-label")
        assert name in why and "could not be read" not in why, why
        assert fake_llm.model_listings > listings


async def test_a_model_list_that_fails_does_not_make_a_new_judge(
    fake_llm: FakeLLMServer, tmp_path: Path
) -> None:
    fake_llm.local = llama_cpp_python(GGUF)
    fake_llm.respond_with(FLAVOR, worst_first)
    async with serving(tmp_path, fake_llm.base_url(FLAVOR)) as address:
        name = await qualified_worst(fake_llm, address, tmp_path, f"{FLAVOR}:qwen")
        fake_llm.local.models_error = 503
        why = await refusal(address, "qwen")
        assert name in why and "could not be read (HTTP 503)" in why, why


async def test_a_study_with_a_refused_judge_is_refused_while_its_server_is_busy(
    fake_llm: FakeLLMServer, tmp_path: Path
) -> None:
    fake_llm.local = llama_cpp_python(GGUF)
    fake_llm.respond_with(FLAVOR, worst_first)
    async with serving(tmp_path, fake_llm.base_url(FLAVOR)) as address:
        name = await qualified_worst(fake_llm, address, tmp_path, f"{FLAVOR}:qwen")
        ranking = rank_pb2.JobSpec(judges=[llm_judge(FLAVOR, "qwen", timeout_seconds=1)])
        spec = study_pb2.StudySpec(depth=3, ranking=ranking)
        async with grpc.aio.insecure_channel(address) as channel, busy(fake_llm):
            stubs = Stubs.on(channel)
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await started_study(stubs, spec, inputs_request("", collection(queries=2, docs=4)))
    assert refused.value.code() == grpc.StatusCode.FAILED_PRECONDITION, refused.value
    assert name in (refused.value.details() or "")


async def test_options_that_do_not_make_another_judge_keep_its_refusal(
    fake_llm: FakeLLMServer, tmp_path: Path
) -> None:
    """Issue 34 item 22 (docs/judges.md, "Which options make another judge")."""
    fake_llm.local = llama_cpp_python(GGUF)
    fake_llm.respond_with(FLAVOR, worst_first_or_by_score)
    async with serving(tmp_path, fake_llm.base_url(FLAVOR)) as address:
        name = await qualified_worst(fake_llm, address, tmp_path, f"{FLAVOR}:qwen?temperature=0")
        for same_judge in (
            {"temperature": 0.0},
            {"temperature": 0.0000001},
            {"temperature": 0.0, "max_output_tokens": 200},
            {"temperature": 0.0, "passage_token_budget": 299},
            {"temperature": 0.0, "timeout_seconds": 30},
        ):
            assert name in await refusal(address, "qwen", **same_judge), same_judge
        mode = llm_judge(FLAVOR, "qwen", temperature=0.0)
        mode.parameters.options["format"] = "text"  # the default, spelled out
        assert name in await admission(address, mode)

        # Another temperature is another judge: admitted, with a note naming the refused one.
        job = await admission(address, llm_judge(FLAVOR, "qwen", temperature=0.7))
        assert isinstance(job, rank_pb2.Job), job
        (judge,) = job.spec.judges
        assert not judge.qualification and not judge.admitted_unqualified
        assert name in judge.admission_note and "temperature 0.7" in judge.admission_note

        # `tierank rank` says so as the job starts.
        pool = tmp_path / "pool.jsonl"
        pool.write_text(
            "".join(f'{{"id": "c{i}", "text": "c{i} has score {i}."}}\n' for i in range(4))
        )
        ranked = await tierank(
            "rank",
            str(pool),
            "--query",
            "q",
            "--judge",
            f"{FLAVOR}:qwen?temperature=0.7",
            "--k",
            "2",
            "--server",
            address,
            "--format",
            "json",
        )
        assert ranked.returncode == 0, ranked.stderr
        assert f"judge {FLAVOR}/qwen: a new judge: it differs only by options" in ranked.stderr
