"""Builds judges from job specs: the offline ones here, the LLM providers' (declared in
providers.py) through llm_providers.py."""

from __future__ import annotations

from collections.abc import Callable, Mapping

from tierank.server.judges.accounts import ProviderAccount
from tierank.server.judges.base import Judge, JudgeConfig, PoolContext
from tierank.server.judges.graders import Grader, LLMGrader, OracleGrader
from tierank.server.judges.llm_providers import LLMProviders
from tierank.server.judges.offline import LexicalJudge, OracleJudge
from tierank.server.judges.providers import PROVIDERS
from tierank.server.judges.settings import BatchSettings, JudgeSettings

# Judges that call no provider, and so spend on no one's key.
_OFFLINE: Mapping[str, Callable[[JudgeConfig, PoolContext], Judge]] = {
    "lexical": LexicalJudge,
    "oracle": OracleJudge,
}


class JudgeFactory:
    """Lives as long as the server; shared provider state (limiters, breakers, clients)
    hangs here, for the server's keys and for each tenant account's."""

    def __init__(self, settings: JudgeSettings | None = None) -> None:
        """`settings` defaults to JudgeSettings.load(): the environment and its config file."""
        self._llm = LLMProviders(settings or JudgeSettings.load())

    @property
    def providers(self) -> tuple[str, ...]:
        return tuple(sorted((*_OFFLINE, *PROVIDERS)))

    @property
    def batch_settings(self) -> BatchSettings:
        """How judges in batch mode gather, submit and follow provider batches."""
        return self._llm.settings.batches

    def share_limits(self, replicas: int) -> None:
        """Split every provider rate limit among `replicas` replicas (see judges/limits.py)."""
        self._llm.share.replicas = max(1, replicas)

    def knows(self, provider: str) -> bool:
        return provider in _OFFLINE or provider in PROVIDERS

    def build(
        self, config: JudgeConfig, pool: PoolContext, account: ProviderAccount | None = None
    ) -> Judge:
        """A judge for `config`. With `account`, an LLM judge spends on that tenant's own key,
        with a client, breakers and limiters of its own; offline judges ignore it."""
        offline = _OFFLINE.get(config.provider)
        if offline is not None:
            return offline(config, pool)
        if config.provider not in PROVIDERS:
            raise ValueError(f"unknown judge provider {config.provider!r}")
        return self._llm.build(config, account)

    async def identity(self, config: JudgeConfig, account: ProviderAccount | None = None) -> str:
        """The judge identity (Judge.judge_identity) of `config`, without a job to build it in:
        for a qualification, which is stored under it, so it is waited for (a busy server's
        model list) as long as one of the judge's calls may take."""
        judge = self.build(config, PoolContext("", "", ()), account)
        try:
            await judge.prepare(patient=True)
            return judge.judge_identity()
        finally:
            await judge.aclose()

    def grades(self, provider: str) -> bool:
        """Whether judges of `provider` can grade pairs pointwise (every LLM provider and the
        oracle; not `lexical`, which only orders)."""
        return provider == "oracle" or provider in PROVIDERS

    def build_grader(self, config: JudgeConfig, account: ProviderAccount | None = None) -> Grader:
        """A pointwise grader on the same provider clients, limits and breakers as the
        listwise judges of the same account (or of the server's key)."""
        if not self.grades(config.provider):
            raise ValueError(f"provider {config.provider!r} cannot grade pairs pointwise")
        if config.provider == "oracle":
            return OracleGrader(config)
        return LLMGrader(self._llm.build(config, account))

    async def aclose(self) -> None:
        """Close provider clients held for the server's lifetime, tenants' included."""
        await self._llm.aclose()
