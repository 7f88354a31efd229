"""A self-hosted judge refused by its qualification, as the tests of issues 22 and 34 make
one: a fake llama-cpp-python server whose judge ranks labelled passages worst first, a tierank
server on the test's database, and the one-slot server kept busy by another client."""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import aiohttp
from fakes import Answer, FakeLLMServer, Hang, Recorded, rank_by_score
from job_helpers import tierank

from tierank.server.app import background_server
from tierank.server.settings import ServerSettings

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


def worst_first_or_by_score(request: Recorded) -> Answer:
    """The qualification's passages worst first; a job's (`score N` in each) best first."""
    return worst_first(request) if _GRADED.search(request.prompt) else rank_by_score(request)


async def qualified_worst(fake: FakeLLMServer, address: str, tmp_path: Path, judge: str) -> str:
    """Qualifies `judge` (worse than chance) on the idle server; the qualification's name."""
    qualified = await tierank(
        "qualify", "--judge", judge, *labelled_files(tmp_path), "--k", "4", "--server", address
    )
    assert qualified.returncode == 5, qualified.stdout + qualified.stderr
    (name,) = re.findall(r"qualifications/\w+", qualified.stdout + qualified.stderr)[:1]
    return name


@asynccontextmanager
async def busy(fake: FakeLLMServer) -> AsyncIterator[None]:
    """The one-slot server busy with another client's long completion for the whole block:
    its model list waits behind it, as llama-cpp-python's does."""
    done = asyncio.Event()
    fake.script(FLAVOR, Hang(60, released=done))
    asked = len(fake.requests(FLAVOR))
    body = {"model": "qwen", "messages": [{"role": "user", "content": "a long answer"}]}
    async with aiohttp.ClientSession() as client:
        url = f"{fake.base_url(FLAVOR)}/chat/completions"
        other = asyncio.create_task(client.post(url, json=body))
        while len(fake.requests(FLAVOR)) == asked:
            await asyncio.sleep(0.01)
        try:
            yield
        finally:
            done.set()
            with contextlib.suppress(aiohttp.ClientError):
                await other
