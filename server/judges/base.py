"""The one judge interface. Offline judges and every LLM provider implement it.

A judge receives one batch (k passages in the order it must present them) and returns the
ordering it saw, best first, with usage. Provider failures are returned, never raised, so a
failing judge cannot crash a job: a failed reply adds no votes.
"""

from __future__ import annotations

import abc
import enum
from collections.abc import Mapping
from dataclasses import dataclass, field


class JudgeConfigError(ValueError):
    """A judge spec that cannot work; `field` is relative to the judge (e.g. "options.noise")."""

    def __init__(self, field: str, rule: str) -> None:
        super().__init__(f"{field}: {rule}")
        self.field = field
        self.rule = rule


@dataclass(frozen=True)
class Passage:
    id: str
    text: str
    metadata: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class BatchRequest:
    """One judge call. `passages` is already in this judge's presentation order."""

    call_id: str
    query: str
    rubric: str
    passages: tuple[Passage, ...]
    # Per-call seed (derived from the job seed and call id) for judges with randomness.
    seed: int = 0
    # Absolute deadline on the `time.monotonic()` clock; None means no deadline.
    deadline: float | None = None
    # Planned before the job last started (a restart, a takeover): the judge may have handed it
    # to its provider for later (batch mode) and find it there, rather than asking again.
    resumed: bool = False


@dataclass(frozen=True)
class JudgeUsage:
    """`input_tokens` counts every prompt token; `cached_input_tokens` (read from the
    provider's prompt cache) and `cache_write_input_tokens` (written to it, Anthropic) are
    parts of it, each charged at its own price (judges.prices)."""

    input_tokens: int = 0
    output_tokens: int = 0
    cached_input_tokens: int = 0
    cache_write_input_tokens: int = 0
    cost_usd: float = 0.0
    latency_s: float = 0.0


class FailureKind(enum.StrEnum):
    UNPARSEABLE = "unparseable"
    TRUNCATED = "truncated"
    RATE_LIMITED = "rate_limited"
    TIMEOUT = "timeout"
    SERVER_ERROR = "server_error"
    CLIENT_ERROR = "client_error"
    # The connection could not be made or broke before an answer came.
    CONNECTION_ERROR = "connection_error"
    # Refused without a request: the provider's circuit breaker is open. Nothing else.
    UNAVAILABLE = "unavailable"


@dataclass(frozen=True)
class JudgeFailure:
    kind: FailureKind
    message: str

    def __str__(self) -> str:
        return f"{self.kind}: {self.message}"


@dataclass(frozen=True)
class JudgeReply:
    # Candidate ids, best first. A partial ordering states only the pairs among its members.
    ordering: tuple[str, ...]
    usage: JudgeUsage = JudgeUsage()
    failure: JudgeFailure | None = None
    # The rendered prompt and raw answer, kept for audit.
    prompt: str = ""
    raw_text: str = ""

    @property
    def failed(self) -> bool:
        return self.failure is not None


@dataclass(frozen=True)
class Waiting:
    """A judge's longest-waiting request in flight: when it was sent (time.monotonic(), not
    when its call was queued) and how long its call may wait in all before it fails."""

    since: float
    time_limit_s: float


@dataclass(frozen=True)
class JudgeConfig:
    """A judge as the job spec names it; the server's own settings hold credentials."""

    provider: str
    model: str = ""
    name: str = ""
    weight: float = 1.0
    temperature: float | None = None
    max_output_tokens: int | None = None
    reasoning: bool | None = None
    timeout_s: float | None = None
    passage_token_budget: int | None = None
    options: Mapping[str, str] = field(default_factory=dict)

    @property
    def display_name(self) -> str:
        return self.name or default_judge_name(self.provider, self.model)


def default_judge_name(provider: str, model: str) -> str:
    """What a judge is called when its spec gives no name: "provider/model" or "provider"."""
    return f"{provider}/{model}" if model else provider


@dataclass(frozen=True)
class PoolContext:
    """What a judge may know about the whole job when it is built."""

    query: str
    rubric: str
    passages: tuple[Passage, ...]
    # The job's seed, for judges that draw something once per job (the simulated oracle's
    # fixed misreadings); each call's own seed is BatchRequest.seed.
    seed: int = 0


class ConfiguredJudge(abc.ABC):
    """What every judge shares, listwise (Judge) or pointwise (Grader): its spec and identity."""

    def __init__(self, config: JudgeConfig) -> None:
        self.config = config

    @property
    def name(self) -> str:
        return self.config.display_name

    @property
    def cacheable(self) -> bool:
        """Whether the same prompt always deserves the same verdict (see the verdict cache)."""
        return True

    @abc.abstractmethod
    def cache_identity(self) -> str:
        """Provider, model, parameters and prompt-template version, as one stable string."""

    def judge_identity(self) -> str:
        """What a qualification of this judge is stored under: its cache identity, less
        anything that depends on the job's pool (a judge is qualified once, for every pool)."""
        return self.cache_identity()

    def qualification_identities(self) -> list[str]:
        """What this judge's qualifications may be stored under, the judge identity first;
        later ones are earlier spellings of the same judge, still honoured."""
        return [self.judge_identity()]

    async def prepare(self, *, patient: bool = False) -> None:
        """Learn what `cacheable` and `cache_identity` depend on beyond the spec (what a
        self-hosted server says it serves). Call it before reading them; it is cheap again.
        `patient`: the identity is needed now (a qualification may be this judge's), so what it
        depends on is waited for as long as one of the judge's calls may take, and asked again
        if an earlier, quicker try could not learn it."""
        return None

    @property
    def identity_doubt(self) -> str | None:
        """Why this judge's identity is not established (a self-hosted server's model list
        could not be read, so which weights answer is unknown); None when it is."""
        return None


class Judge(ConfiguredJudge):
    """A listwise judge: orders one batch of passages."""

    @abc.abstractmethod
    def estimate(self, request: BatchRequest) -> JudgeUsage:
        """An upper estimate of a call's usage, reserved against the budget before the call."""

    @abc.abstractmethod
    async def judge(self, request: BatchRequest) -> JudgeReply:
        """Judge one batch. Returns a failed reply instead of raising on provider errors."""

    @property
    def breaker_open(self) -> bool:
        """Whether calls to this judge are refused now, without a request, because its
        provider's circuit breaker is open (a judge with no provider has none)."""
        return False

    def waiting(self) -> Waiting | None:
        """The request of this judge's calls that has waited longest for its answer, if one is
        in flight; None for judges that send none (offline ones, batch mode)."""
        return None

    @property
    def answers_promptly(self) -> bool:
        """Whether a call in flight may be answered within a shutdown's grace. False for calls
        answered from a provider batch, minutes to hours away: a drain does not wait for them,
        and the job, resumed, finds them in the batch journal and waits again, unpaid."""
        return True

    async def withdraw(self) -> None:
        """The job has ended: calls it asked that are still unanswered are no longer wanted.
        A judge that handed them to a provider for later (batch mode) may tell it to stop."""
        return None

    async def aclose(self) -> None:
        """Release clients and connections."""
