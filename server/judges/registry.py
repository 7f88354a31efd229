"""Builds judges from job specs. The one place that knows every provider name."""

from __future__ import annotations

from collections.abc import Callable

from tierank.server.judges.base import Judge, JudgeConfig, PoolContext
from tierank.server.judges.graders import Grader, LLMGrader, OracleGrader
from tierank.server.judges.llm import LLMJudge
from tierank.server.judges.llm_providers import LLMProviders
from tierank.server.judges.offline import LexicalJudge, OracleJudge
from tierank.server.judges.settings import JudgeSettings

JudgeBuilder = Callable[[JudgeConfig, PoolContext], Judge]
# LLM judges read nothing from the pool; a pointwise grader has none.
_NO_POOL = PoolContext(query="", rubric="", passages=())


class JudgeFactory:
    """Lives as long as the server; shared provider state (limiters, breakers, clients)
    hangs here."""

    def __init__(self, settings: JudgeSettings | None = None) -> None:
        """`settings` defaults to JudgeSettings.load(): the environment and its config file."""
        self._llm = LLMProviders(settings or JudgeSettings.load())
        self._builders: dict[str, JudgeBuilder] = {
            "lexical": LexicalJudge,
            "oracle": OracleJudge,
            **self._llm.builders(),
        }

    @property
    def providers(self) -> tuple[str, ...]:
        return tuple(sorted(self._builders))

    def knows(self, provider: str) -> bool:
        return provider in self._builders

    def build(self, config: JudgeConfig, pool: PoolContext) -> Judge:
        try:
            builder = self._builders[config.provider]
        except KeyError:
            raise ValueError(f"unknown judge provider {config.provider!r}") from None
        return builder(config, pool)

    def build_grader(self, config: JudgeConfig) -> Grader:
        """A pointwise grader on the same provider clients, limits and breakers as the
        listwise judges."""
        if config.provider == "oracle":
            return OracleGrader(config)
        builder = self._llm.builders().get(config.provider)
        if builder is None:
            raise ValueError(f"provider {config.provider!r} cannot grade pairs pointwise")
        judge = builder(config, _NO_POOL)
        assert isinstance(judge, LLMJudge)
        return LLMGrader(judge)

    async def aclose(self) -> None:
        """Close provider clients held for the server's lifetime."""
        await self._llm.aclose()
