"""The judges: given a rendered batch, an ordering with its usage or a typed failure
(`Judge`), and given one (query, passage) pair, a grade 0–3 (`Grader`).

Offline judges (`lexical`, `oracle`, judges/offline.py) and the LLM providers (OpenAI,
Anthropic, Gemini and any OpenAI-compatible endpoint, each an `LLMJudge` over its official SDK:
PROVIDERS.md) implement `Judge`; `JudgeFactory` builds the one a `JudgeConfig` names. A new
provider subclasses `LLMJudge` (its `_complete`, one request to the provider) or, when it calls
no model, `Judge` itself; it is declared once in judges/providers.py (its environment, batch
API and price fraction, batch transport, GenAI system name), maps its SDK's errors in
judges/sdk_errors.py, and is built in judges/llm_providers.py, which imports its SDK with its
first judge.
Failures are returned, never raised: a failed reply adds no votes.
"""

from tierank.server.judges.base import (
    BatchRequest,
    ConfiguredJudge,
    FailureKind,
    Judge,
    JudgeConfig,
    JudgeConfigError,
    JudgeFailure,
    JudgeReply,
    JudgeUsage,
    Passage,
    PoolContext,
)
from tierank.server.judges.graders import Grader, GradeReply, GradeRequest, UngradablePassage
from tierank.server.judges.llm import LLMJudge
from tierank.server.judges.registry import JudgeFactory
from tierank.server.judges.settings import JudgeSettings, JudgeSettingsError, ProviderSettings

__all__ = [
    "BatchRequest",
    "ConfiguredJudge",
    "FailureKind",
    "GradeReply",
    "GradeRequest",
    "Grader",
    "Judge",
    "JudgeConfig",
    "JudgeConfigError",
    "JudgeFactory",
    "JudgeFailure",
    "JudgeReply",
    "JudgeSettings",
    "JudgeSettingsError",
    "JudgeUsage",
    "LLMJudge",
    "Passage",
    "PoolContext",
    "ProviderSettings",
    "UngradablePassage",
]
