"""Whether two judge identities name the same judge, for admission by qualification.

A qualification is stored under the identity of the judge it measured (`judge_identity`):
provider, model, parameters and prompt version as one string. A job's judge is admitted by the
latest qualification of the same judge, and that is not the same string: only what makes a
different judge counts (docs/judges.md, "Which options make another judge"):

- the model: the provider, the endpoint of a self-hosted server, and the weights it says it
  serves (its model list), or, where it says nothing, the model name as asked;
- the question and the form of its answer: the prompt template (one whose qualifications carry
  over, `prompt.QUALIFICATIONS_CARRY_OVER_FROM`, counts as the current one), `answer_format`,
  `reasoning` and the provider options (e.g. `reasoning_effort`, `thinking_budget`);
- `temperature`, to TEMPERATURE_DECIMALS decimal: how answers are drawn from the model (0 and
  0.0000001 are one judge, 0 and 0.7 two).

The rest leaves the judge what it was, so a judge refused with some value of them is refused
with any (measure it again to change its verdict: the latest qualification decides):
`max_output_tokens` (a larger allowance does not make a model rank better), and
`passage_token_budget` (how much of each passage is shown), listed in NOT_DEFINING; `mode` (how
calls travel); and `timeout_seconds`, `weight` and `name`, which no identity holds.

Identities that are not JSON objects (the offline judges') are compared as written.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tierank.server.judges.endpoints import canonical_base_url
from tierank.server.judges.prompt import QUALIFICATIONS_CARRY_OVER_FROM, TEMPLATE_VERSION

# Identity fields that do not make another judge.
NOT_DEFINING = frozenset({"max_output_tokens", "passage_token_budget"})
# Options that do not either: `mode` says how calls travel, `format` is `answer_format` again.
NOT_DEFINING_OPTIONS = frozenset({"mode", "format"})
# Identity fields that say which model judges (compared by `JudgeKey.same_model`).
_MODEL_FIELDS = frozenset({"provider", "model", "served_model", "base_url"})
TEMPERATURE_DECIMALS = 1


@dataclass(frozen=True)
class JudgeKey:
    """What an identity says about which judge it is, read for comparison."""

    provider: str
    # A self-hosted server's base URL in one spelling; None for a vendor's API.
    endpoint: str | None
    # What the server says it serves; None where it said nothing (or was never asked).
    weights: str | None
    # The model name as the judge was asked for it.
    label: str
    # The other parts that make a different judge, (name, value) sorted by name.
    parameters: tuple[tuple[str, str], ...]
    # An identity that is not a JSON object, as written (then nothing else is read).
    written: str | None = None

    def same_judge(self, other: JudgeKey) -> bool:
        if self.written is not None or other.written is not None:
            return self.written == other.written
        return self.same_model(other) and self.parameters == other.parameters

    def same_model(self, other: JudgeKey) -> bool:
        """The same provider, endpoint and model: the weights where both know them, else the
        model name as asked."""
        if self.written is not None or other.written is not None:
            return self.written == other.written
        if (self.provider, self.endpoint) != (other.provider, other.endpoint):
            return False
        if self.weights is not None and other.weights is not None:
            return self.weights == other.weights
        return self.label == other.label

    def same_place(self, other: JudgeKey) -> bool:
        """The same provider and endpoint, asked the same way: judges that only their weights
        could tell apart."""
        if self.written is not None or other.written is not None:
            return self.written == other.written
        return (self.provider, self.endpoint, self.parameters) == (
            other.provider,
            other.endpoint,
            other.parameters,
        )

    @property
    def model(self) -> str:
        """The model, in words: the ids of the model list's entries where it was read (the
        weights' path, for llama-cpp-python), else what the server reported, else the name."""
        if self.weights is None:
            return self.label
        try:
            entries = json.loads(self.weights)
        except ValueError:
            return self.weights
        ids = (
            [e["id"] for e in entries if isinstance(e, dict) and "id" in e]
            if isinstance(entries, list)
            else []
        )
        return ", ".join(map(str, ids)) or self.weights

    def differences(self, other: JudgeKey) -> list[str]:
        """The parameters that differ, as `name value (other there)`."""
        mine, theirs = dict(self.parameters), dict(other.parameters)
        return [
            f"{name} {mine.get(name, 'unset')} ({theirs.get(name, 'unset')} there)"
            for name in sorted(mine.keys() | theirs.keys())
            if mine.get(name) != theirs.get(name)
        ]


def judge_key(identity: str, label: str) -> JudgeKey:
    """`identity` (a judge identity as stored) read for comparison; `label`: the model name the
    judge was asked for (identities that know the weights leave it out)."""
    try:
        fields = json.loads(identity)
    except ValueError:
        fields = None
    if not isinstance(fields, dict):
        return JudgeKey("", None, None, "", (), written=identity)
    base_url = fields.get("base_url")
    return JudgeKey(
        provider=str(fields.get("provider", "")),
        endpoint=canonical_base_url(base_url) if isinstance(base_url, str) and base_url else None,
        weights=_weights(fields.get("served_model")),
        label=str(fields.get("model") or label),
        parameters=_parameters(fields),
    )


def _weights(served: object) -> str | None:
    """A model list entry in one spelling (its JSON re-encoded), or the reported name."""
    if not isinstance(served, str) or not served:
        return None
    try:
        return json.dumps(json.loads(served), sort_keys=True, separators=(",", ":"))
    except ValueError:
        return served


def _parameters(fields: Mapping[str, Any]) -> tuple[tuple[str, str], ...]:
    # Every field not known to leave the judge as it was counts: one added to identities later
    # makes another judge until it is listed here.
    kept: dict[str, object] = {
        name: value
        for name, value in fields.items()
        if name not in NOT_DEFINING and name not in _MODEL_FIELDS
    }
    if kept.get("template") in QUALIFICATIONS_CARRY_OVER_FROM:
        kept["template"] = TEMPLATE_VERSION
    options = kept.get("options")
    if isinstance(options, dict):
        kept["options"] = {k: v for k, v in options.items() if k not in NOT_DEFINING_OPTIONS}
    temperature = kept.get("temperature")
    if isinstance(temperature, int | float) and not isinstance(temperature, bool):
        kept["temperature"] = round(float(temperature), TEMPERATURE_DECIMALS) + 0.0  # no -0.0
    return tuple(sorted((name, json.dumps(value, sort_keys=True)) for name, value in kept.items()))
