"""Fake LLM providers that actually rank: each answer is computed from the prompt it answers.

Every candidate's text carries a hidden grade ("grade 17"). A `GradedResponder` reads the
numbered passages back out of the rendered prompt and ranks them by that grade, in the answer
form the prompt asks for (JSON or `[2] > [1]`), so a real server driving real SDKs against the
fake HTTP servers of tests/providers/fakes.py gets meaningful verdicts and the right top-K.

The fake server runs on its own thread and event loop (`FakeLLMThread`), so it keeps answering
while a test blocks on a synchronous gRPC call or on a server subprocess.

The benchmark (tierank.bench.provider_bench) uses this module too; `import_fakes()` puts the
test-support folders on sys.path for it, as the tests' conftest files do for pytest.
"""

from __future__ import annotations

import asyncio
import json
import math
import random
import re
import sys
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

_TESTS = Path(__file__).resolve().parent.parent


def import_fakes() -> None:
    """Make `fakes` (tests/providers) and this module importable by their plain names."""
    for folder in (_TESTS / "providers", _TESTS / "e2e"):
        if str(folder) not in sys.path:
            sys.path.insert(0, str(folder))


import_fakes()

from fakes import FLAVORS, Answer, FakeLLMServer, Hang, Recorded, Step  # noqa: E402

# A model name per flavor, and USD per 1M tokens for them (the tests recompute costs from these;
# the fake-llama of the OpenAI-compatible server has no price, as a local model would not).
MODELS: Mapping[str, str] = {
    "openai": "fake-gpt",
    "anthropic": "fake-claude",
    "gemini": "fake-gemini",
    "openai-compatible": "fake-llama",
}
FAKE_MODEL_PRICES: Mapping[str, Mapping[str, float]] = {
    "openai/fake-gpt": {"input": 2.0, "cached_input": 0.5, "output": 8.0},
    "anthropic/fake-claude": {"input": 3.0, "cached_input": 0.3, "output": 15.0},
    "gemini/fake-gemini": {"input": 0.3, "cached_input": 0.03, "output": 2.5},
}

_PASSAGE_LINE = re.compile(r"^\[(\d+)\] (.*)$", re.MULTILINE)
_GRADE = re.compile(r"\bgrade (\d+)\b")
_CANDIDATE_ID = re.compile(r"\b(c\d{3})\b")
# The shared head of every prompt (instructions, rubric, query) is what a provider's prompt
# cache would serve; the fake reports this many of each request's input tokens as cached.
CACHED_PREFIX_TOKENS = 48


@dataclass(frozen=True)
class GradedCandidate:
    id: str
    text: str
    grade: int


def graded_pool(n: int, seed: int = 0, words: int = 40) -> list[GradedCandidate]:
    """n candidates with distinct grades, listed in a shuffled (retrieval) order.

    The id and grade are written into the text, so a fake reads both back out of a prompt.
    """
    rng = random.Random(seed)
    grades = rng.sample(range(1, 10 * n), n)
    pool = []
    for i, grade in enumerate(grades):
        filler = " ".join(f"w{rng.randrange(1000)}" for _ in range(words))
        text = f"passage c{i:03d} grade {grade}: {filler}"
        pool.append(GradedCandidate(f"c{i:03d}", text, grade))
    return pool


def best_first(pool: Sequence[GradedCandidate]) -> list[str]:
    return [c.id for c in sorted(pool, key=lambda c: -c.grade)]


@dataclass(frozen=True)
class PromptPassage:
    number: int
    candidate_id: str
    grade: int


def passages_in(prompt: str) -> list[PromptPassage]:
    """The numbered passages of a rendered ranking prompt, in presentation order."""
    found = []
    for number, text in _PASSAGE_LINE.findall(prompt):
        grade, candidate = _GRADE.search(text), _CANDIDATE_ID.search(text)
        if grade and candidate:
            found.append(PromptPassage(int(number), candidate.group(1), int(grade.group(1))))
    return found


def presented_ids(prompt: str) -> tuple[str, ...]:
    return tuple(p.candidate_id for p in passages_in(prompt))


def ranking_text(prompt: str, numbers: Sequence[int]) -> str:
    """The numbers in the answer form the prompt asks for."""
    if "Answer with JSON only" in prompt:
        return json.dumps({"ranking": list(numbers)})
    return " > ".join(f"[{n}]" for n in numbers)


# Reorders a batch's passages (already ranked by grade, best first): how a fake "disagrees".
Twist = Callable[[list[PromptPassage]], list[PromptPassage]]


def reverse_pairs(pairs: Sequence[tuple[str, str]]) -> Twist:
    """For each (better, worse) pair shown together, ranks each where the other belongs: a
    judge that always gets these pairs wrong."""

    def twist(ranked: list[PromptPassage]) -> list[PromptPassage]:
        swapped = list(ranked)
        for better, worse in pairs:
            ids = [p.candidate_id for p in swapped]
            if better in ids and worse in ids:
                i, j = ids.index(better), ids.index(worse)
                swapped[i], swapped[j] = swapped[j], swapped[i]
        return swapped

    return twist


@dataclass(frozen=True)
class Answered:
    """One request the fake answered, with the answer it gave."""

    prompt: str
    answer: Answer


@dataclass
class GradedResponder:
    """A `fakes.Responder` that ranks the prompt's passages by their hidden grade.

    `noise` blurs each grade as this judge perceives it (Gaussian, fixed per `name` and prompt,
    so the same prompt always gets the same answer); `latency_s` delays each answer (with up to
    `jitter_s` more, also fixed per prompt so runs repeat). Usage is the prompt at 4 characters
    per token, of which CACHED_PREFIX_TOKENS are reported as served from the prompt cache.
    """

    latency_s: float = 0.0
    jitter_s: float = 0.0
    noise: float = 0.0
    name: str = ""
    twist: Twist | None = None
    answered: list[Answered] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def __call__(self, request: Recorded) -> Step:
        prompt = request.prompt
        rng = random.Random(f"{self.name}/{prompt}")
        shown = passages_in(prompt)
        perceived = {p.number: p.grade + rng.gauss(0, self.noise) for p in shown}
        ranked = sorted(shown, key=lambda p: -perceived[p.number])
        if self.twist is not None:
            ranked = self.twist(ranked)
        text = ranking_text(prompt, [p.number for p in ranked])
        input_tokens = sum(math.ceil(len(m) / 4) for _, m in request.messages)
        answer = Answer(
            text=text,
            input_tokens=input_tokens,
            output_tokens=math.ceil(len(text) / 4),
            cached_input_tokens=min(CACHED_PREFIX_TOKENS, input_tokens),
        )
        with self._lock:
            self.answered.append(Answered(prompt, answer))
        delay = self.latency_s + self.jitter_s * rng.random()
        return Hang(delay, then=answer) if delay > 0 else answer

    def answers_for(self, presented: Sequence[str]) -> list[Answer]:
        """Answers given to prompts that showed exactly these candidates in this order."""
        wanted = tuple(presented)
        with self._lock:
            answered = list(self.answered)
        return [a.answer for a in answered if presented_ids(a.prompt) == wanted]


def answer_by_grade(
    server: FakeLLMServer, flavors: Sequence[str], **responder: Any
) -> dict[str, GradedResponder]:
    """Installs one GradedResponder per flavor on `server`; returns them by flavor."""
    responders = {flavor: GradedResponder(name=flavor, **responder) for flavor in flavors}
    for flavor, graded in responders.items():
        server.respond_with(flavor, graded)
    return responders


class FakeLLMThread:
    """A `FakeLLMServer` serving from its own thread and event loop."""

    def __init__(self) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self.server: FakeLLMServer | None = None

    def __enter__(self) -> FakeLLMServer:
        self._thread.start()
        self.server = self._run(self._start())
        return self.server

    def __exit__(self, *exc_info: object) -> None:
        if self.server is not None:
            self._run(self.server.stop())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()

    async def _start(self) -> FakeLLMServer:
        # Built inside the loop that will serve it.
        return await FakeLLMServer().start()

    def _run(self, coroutine: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result(30)


def judges_config(
    server: FakeLLMServer,
    *,
    prices: Mapping[str, Mapping[str, float]],
    breaker: Mapping[str, Mapping[str, float]] | None = None,
    max_attempts: int = 3,
) -> dict[str, Any]:
    """A judges config file's content (PROVIDERS.md layout) pointing every provider at `server`,
    with millisecond retry backoff; `breaker` overrides the lenient default per provider."""
    breaker = breaker or {}
    providers = {
        flavor: {
            "api_key": "test-key",
            "base_url": server.base_url(flavor),
            "timeout_s": 10.0,
            "retry": {
                "max_attempts": max_attempts,
                "base_delay_s": 0.01,
                "max_delay_s": 0.05,
                "max_retry_after_s": 5.0,
            },
            "breaker": dict(breaker.get(flavor, {"failure_threshold": 100, "cooldown_s": 60.0})),
        }
        for flavor in FLAVORS
    }
    return {"providers": providers, "prices": {key: dict(p) for key, p in prices.items()}}


# Environment variables that would override the config file (PROVIDERS.md): a test server must
# never see a real key or endpoint.
PROVIDER_ENV = (
    "OPENAI_API_KEY",
    "ANTHROPIC_API_KEY",
    "GEMINI_API_KEY",
    "GOOGLE_API_KEY",
    "TIERANK_OPENAI_COMPATIBLE_API_KEY",
    "TIERANK_OPENAI_BASE_URL",
    "TIERANK_ANTHROPIC_BASE_URL",
    "TIERANK_GEMINI_BASE_URL",
    "TIERANK_OPENAI_COMPATIBLE_BASE_URL",
    "TIERANK_JUDGES_CONFIG",
)
