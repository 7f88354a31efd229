"""Builds judges from job specs. The one place that knows every provider name."""

from __future__ import annotations

from collections.abc import Callable

from tierank.server.judges.base import Judge, JudgeConfig, PoolContext
from tierank.server.judges.llm_providers import LLMProviders
from tierank.server.judges.offline import LexicalJudge, OracleJudge
from tierank.server.judges.settings import JudgeSettings

JudgeBuilder = Callable[[JudgeConfig, PoolContext], Judge]


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

    async def aclose(self) -> None:
        """Close provider clients held for the server's lifetime."""
        await self._llm.aclose()
