"""Judge settings from env and config files; building judges and their cache identities."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tierank.server.judges.base import JudgeConfig, Passage, PoolContext
from tierank.server.judges.prices import DEFAULT_PRICES
from tierank.server.judges.prompt import TEMPLATE_VERSION
from tierank.server.judges.providers import PROVIDERS
from tierank.server.judges.registry import JudgeFactory
from tierank.server.judges.settings import JudgeSettings, JudgeSettingsError, RateLimit

POOL = PoolContext("q", "r", (Passage("a", "alpha"), Passage("b", "beta")))
ENV = {
    "OPENAI_API_KEY": "sk-env",
    "ANTHROPIC_API_KEY": "ant-env",
    "GOOGLE_API_KEY": "g-env",
    "TIERANK_OPENAI_COMPATIBLE_BASE_URL": "http://127.0.0.1:9/v1",
}


def test_environment_provides_credentials_and_base_urls() -> None:
    settings = JudgeSettings.load(environ=ENV)
    assert settings.provider("openai").api_key == "sk-env"
    assert settings.provider("gemini").api_key == "g-env"
    assert settings.provider("openai-compatible").base_url == "http://127.0.0.1:9/v1"
    assert settings.provider("openai-compatible").api_key is None
    both = JudgeSettings.load(environ={**ENV, "GEMINI_API_KEY": "gem-first"})
    assert both.provider("gemini").api_key == "gem-first"


def test_toml_config_file_with_environment_overrides(tmp_path: Path) -> None:
    path = tmp_path / "judges.toml"
    path.write_text(
        """
[providers.openai]
api_key = "sk-file"
max_concurrency = 4
rate_limit = { requests = 500, tokens = 30000 }
retry = { max_attempts = 2 }
breaker = { failure_threshold = 9, cooldown_s = 5 }

[rate_limits."openai/gpt-4.1"]
requests = 100

[prices."openai/my-finetune"]
input = 1.0
cached_input = 0.5
output = 2.0
""",
        encoding="utf-8",
    )
    from_file = JudgeSettings.load(environ={}, config_path=path)
    openai = from_file.provider("openai")
    assert (openai.api_key, openai.max_concurrency) == ("sk-file", 4)
    assert openai.retry.max_attempts == 2
    assert openai.breaker.failure_threshold == 9
    assert from_file.rate_limit("openai", "gpt-4.1") == RateLimit(requests=100)
    assert from_file.rate_limit("openai", "gpt-4o") == RateLimit(requests=500, tokens=30000)
    assert from_file.price("openai", "my-finetune-v2") is not None
    assert from_file.price("openai", "gpt-4.1") == DEFAULT_PRICES["openai/gpt-4.1"]

    env_wins = JudgeSettings.load(
        environ={"OPENAI_API_KEY": "sk-env", "TIERANK_JUDGES_CONFIG": str(path)}
    )
    assert env_wins.provider("openai").api_key == "sk-env"
    assert env_wins.provider("openai").max_concurrency == 4


def test_json_config_and_typos_are_refused(tmp_path: Path) -> None:
    good = tmp_path / "judges.json"
    good.write_text(json.dumps({"providers": {"anthropic": {"timeout_s": 12}}}), encoding="utf-8")
    assert JudgeSettings.load(environ={}, config_path=good).provider("anthropic").timeout_s == 12
    for bad in (
        {"providers": {"openai": {"max_concurency": 3}}},
        {"providers": {"opneai": {}}},
        {"limits": {}},
        {"providers": {"openai": {"retry": {"attempts": 3}}}},
    ):
        good.write_text(json.dumps(bad), encoding="utf-8")
        with pytest.raises(ValueError):
            JudgeSettings.load(environ={}, config_path=good)


def test_price_lookup_prefers_the_longest_prefix() -> None:
    settings = JudgeSettings()
    assert (
        settings.price("openai", "gpt-4.1-mini-2025-04-14") == DEFAULT_PRICES["openai/gpt-4.1-mini"]
    )
    assert settings.price("openai", "gpt-4.1-2025-04-14") == DEFAULT_PRICES["openai/gpt-4.1"]
    assert settings.price("openai-compatible", "gpt-4.1") is None
    assert settings.price("openai", "unknown-model") is None


async def test_factory_builds_every_provider_and_refuses_bad_specs() -> None:
    factory = JudgeFactory(JudgeSettings.load(environ=ENV))
    assert {"openai", "anthropic", "gemini", "openai-compatible"} <= set(factory.providers)
    for provider, model in [
        ("openai", "gpt-4.1"),
        ("anthropic", "claude-haiku-4-5"),
        ("gemini", "gemini-2.5-flash"),
        ("openai-compatible", "qwen2.5:7b"),
    ]:
        judge = factory.build(JudgeConfig(provider, model), POOL)
        assert judge.name == f"{provider}/{model}"
    with pytest.raises(ValueError, match="unknown option"):
        factory.build(JudgeConfig("openai", "gpt-4.1", options={"temprature": "0"}), POOL)
    with pytest.raises(ValueError, match="model"):
        factory.build(JudgeConfig("anthropic"), POOL)
    await factory.aclose()

    keyless = JudgeFactory(JudgeSettings.load(environ={}))
    with pytest.raises(ValueError, match="OPENAI_API_KEY"):
        keyless.build(JudgeConfig("openai", "gpt-4.1"), POOL)
    with pytest.raises(ValueError, match="BASE_URL"):
        keyless.build(JudgeConfig("openai-compatible", "llama3"), POOL)
    await keyless.aclose()


async def test_cache_identity_is_stable_and_covers_every_parameter() -> None:
    factory = JudgeFactory(JudgeSettings.load(environ=ENV))

    def identity(**config: object) -> str:
        spec = {"provider": "openai", "model": "gpt-4.1", **config}
        return factory.build(JudgeConfig(**spec), POOL).cache_identity()  # type: ignore[arg-type]

    base = identity(temperature=0.0)
    assert base == identity(temperature=0.0)
    assert TEMPLATE_VERSION in base
    variants = [
        identity(temperature=0.7),
        identity(temperature=0.0, model="gpt-4.1-mini"),
        identity(temperature=0.0, max_output_tokens=500),
        identity(temperature=0.0, reasoning=True),
        identity(temperature=0.0, passage_token_budget=100),
        identity(temperature=0.0, options={"format": "text"}),
        identity(temperature=0.0, provider="openai-compatible"),
    ]
    assert len({base, *variants}) == len(variants) + 1
    # The name and weight are bookkeeping: they do not change a verdict.
    assert identity(temperature=0.0, name="judge-a", weight=2.0) == base
    await factory.aclose()


@pytest.mark.parametrize(
    ("name", "content", "expected"),
    [
        (
            "judges.toml",
            "[providers.openai]\nmax_concurency = 3\n",
            ["'providers.openai.max_concurency'", "max_concurrency", "timeout_s"],
        ),
        (
            "judges.toml",
            "[providers.openai]\nretry = { attempts = 3 }\n",
            ["'providers.openai.retry.attempts'", "max_attempts"],
        ),
        ("judges.toml", "[providers.opneai]\n", ["'providers.opneai'", "openai-compatible"]),
        ("judges.toml", "[limits]\n", ["'limits'", "prices, providers, rate_limits"]),
        ("judges.toml", "[providers.openai\ntimeout_s = 3\n", ["not valid TOML", "line 1"]),
        ("judges.json", '{"providers": {"openai": ', ["not valid JSON"]),
        ("judges.json", '{"providers": {"openai": 3}}', ["providers.openai must be a table"]),
        (
            "judges.toml",
            '[providers.openai]\ntimeout_s = "60"\n',
            ["providers.openai.timeout_s must be a number, not '60'"],
        ),
        ("missing.toml", None, ["no such file"]),
    ],
)
def test_a_bad_config_file_is_one_line_naming_the_file_and_the_key(
    tmp_path: Path, name: str, content: str | None, expected: list[str]
) -> None:
    path = tmp_path / name
    if content is not None:
        path.write_text(content, encoding="utf-8")
    with pytest.raises(JudgeSettingsError) as refused:
        JudgeSettings.load(environ={}, config_path=path)
    message = str(refused.value)
    assert "\n" not in message and message.startswith(f"judges config {path}: ")
    for fragment in expected:
        assert fragment in message, message
    assert isinstance(refused.value, ValueError)


def test_openai_compatible_defaults_suit_a_local_server(tmp_path: Path) -> None:
    """One request in flight and a request's whole time limit as its timeout, unless
    configured; other keys keep them."""
    path = tmp_path / "judges.toml"
    path.write_text('[providers."openai-compatible"]\nbase_url = "http://x/v1"\n', "utf-8")
    for settings in (JudgeSettings(), JudgeSettings.load(environ={}, config_path=path)):
        local = settings.provider("openai-compatible")
        assert (local.max_concurrency, local.timeout_s) == (1, 120.0)
        assert local.retry.max_elapsed_s == local.timeout_s
        assert settings.provider("openai").max_concurrency == 16
    path.write_text('[providers."openai-compatible"]\nmax_concurrency = 4\n', "utf-8")
    configured = JudgeSettings.load(environ={}, config_path=path).provider("openai-compatible")
    assert configured.max_concurrency == 4


@pytest.mark.parametrize("provider", PROVIDERS)
def test_by_default_a_call_that_never_answers_fails_within_two_minutes(provider: str) -> None:
    """Issue 34, item 5: the defaults let a request that is never answered be waited for
    timeout_s x max_attempts (600 s x 4 for a local server). A request and its retries now
    end within max(retry.max_elapsed_s, timeout_s), waits between them included
    (tests/providers/test_llm_judges.py shows the limit holding)."""
    settings = JudgeSettings().provider(provider)
    assert max(settings.retry.max_elapsed_s, settings.timeout_s) <= 120.0
