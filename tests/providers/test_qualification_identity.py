"""A judge refused by its qualification is the same judge however its server's address is
spelled and whatever label a job gives its model (issue 22 item 13)."""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import grpc
from fakes import Answer, FakeLLMServer, Recorded, llama_cpp_python
from job_helpers import llm_judge, scored_spec, tierank

from tierank.client._errors import error_from_rpc
from tierank.server.app import background_server
from tierank.server.judges.prompt import AnswerFormat
from tierank.server.settings import ServerSettings
from tierank.server.storage.base import QualificationRecord
from tierank.server.storage.sqlite import SqliteStorage
from tierank.v1 import rank_pb2, rank_pb2_grpc

FLAVOR = "openai-compatible"
GGUF = "/models/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"
_GRADED = re.compile(r"^\[(\d+)\] passage \S+ grade (\d)", re.MULTILINE)


def worst_first(request: Recorded) -> Answer:
    """A judge worse than chance: it ranks the passages by their grade, lowest first."""
    shown = sorted(_GRADED.findall(request.prompt), key=lambda found: found[1])
    return Answer(" > ".join(f"[{number}]" for number, _ in shown))


def labelled_files(directory: Path) -> list[str]:
    """--qrels, --topics and --passages of 8 queries of 8 passages, grades 0..3."""
    qrels, topics, passages = [], [], []
    for q in range(8):
        topics.append(f"q{q}\tquestion number {q}")
        for d in range(8):
            doc = f"d{q}x{d}"
            qrels.append(f"q{q} 0 {doc} {d % 4}")
            passages.append(json.dumps({"id": doc, "text": f"passage {doc} grade {d % 4}"}))
    args = []
    for name, lines in (("qrels", qrels), ("topics", topics), ("passages", passages)):
        path = directory / f"{name}.txt"
        path.write_text("\n".join(lines) + "\n")
        args += [f"--{name}", str(path)]
    return args


@asynccontextmanager
async def serving(tmp_path: Path, base_url: str) -> AsyncIterator[str]:
    """A tierank server on the test's one database, its openai-compatible judges at `base_url`."""
    config = tmp_path / "judges.json"
    provider = {"base_url": base_url, "timeout_s": 5.0, "retry": {"max_attempts": 1}}
    config.write_text(json.dumps({"providers": {FLAVOR: provider}}))
    settings = ServerSettings(
        listen="127.0.0.1:0", db=tmp_path / "tierank.db", judges_config=config, shutdown_grace_s=1
    )
    async with background_server(settings) as address:
        yield address


async def refusal(address: str, label: str) -> str:
    """Why a job with the judge `label` was refused ("" when it was admitted)."""
    spec = scored_spec(6, [llm_judge(FLAVOR, label)], batch_size=3)
    async with grpc.aio.insecure_channel(address) as channel:
        stub = rank_pb2_grpc.RankServiceStub(channel)
        try:
            await stub.CreateJob(rank_pb2.CreateJobRequest(spec=spec), timeout=30)
        except grpc.aio.AioRpcError as error:
            assert error.code() == grpc.StatusCode.FAILED_PRECONDITION, error
            info = error_from_rpc(error).error_info
            assert info is not None and info.reason == "JUDGE_NOT_QUALIFIED"
            return error.details() or ""
    return ""


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
