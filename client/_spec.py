"""Build `JobSpec` messages from plain Python values, so callers never assemble protos by hand."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from tierank.v1 import rank_pb2

ENSEMBLE_MODES = {
    "all": rank_pb2.ENSEMBLE_MODE_ALL,
    "adaptive": rank_pb2.ENSEMBLE_MODE_ADAPTIVE,
}

JUDGE_SYNTAX = "PROVIDER[:MODEL][?KEY=VALUE&...]"
_BOOLEANS = {"true": True, "1": True, "yes": True, "false": False, "0": False, "no": False}
# `weight=qualified`: the weight the tenant's latest qualification of the judge gives it.
QUALIFIED_WEIGHT = "qualified"
# How `parse_judge` reads each known key, and what it expects; any other key is an option.
JUDGE_KEYS: dict[str, tuple[Callable[[str], Any], str]] = {
    "weight": (float, f"a number or {QUALIFIED_WEIGHT!r}"),
    "name": (str, "a name"),
    "temperature": (float, "a number"),
    "max_output_tokens": (int, "an integer"),
    "reasoning": (lambda text: _BOOLEANS[text.lower()], "true or false"),
    "timeout_seconds": (float, "a number"),
    "passage_token_budget": (int, "an integer"),
}

# Keys accepted for a candidate's id and text: tierank's own, then the Pyserini/MS MARCO names.
_ID_KEYS = ("id", "docid")
_TEXT_KEYS = ("text", "contents")


def judge(
    spec: str,
    *,
    weight: float = 0.0,
    name: str = "",
    options: Mapping[str, str] | None = None,
    temperature: float | None = None,
    max_output_tokens: int | None = None,
    reasoning: bool | None = None,
    timeout_seconds: float | None = None,
    passage_token_budget: int | None = None,
    weight_from_qualification: bool = False,
) -> rank_pb2.JudgeSpec:
    """A judge from "provider" or "provider:model" (the model may itself contain colons).
    `weight_from_qualification`: vote with the weight its latest qualification earned."""
    provider, _, model = spec.partition(":")
    if not provider:
        raise ValueError(f"judge {spec!r} has no provider; expected provider[:model]")
    parameters = rank_pb2.JudgeParameters(options=dict(options or {}))
    for field_name, value in (
        ("temperature", temperature),
        ("max_output_tokens", max_output_tokens),
        ("reasoning", reasoning),
        ("timeout_seconds", timeout_seconds),
        ("passage_token_budget", passage_token_budget),
    ):
        if value is not None:
            setattr(parameters, field_name, value)
    return rank_pb2.JudgeSpec(
        provider=provider,
        model=model,
        weight=weight,
        name=name,
        parameters=parameters,
        weight_from_qualification=weight_from_qualification,
    )


def parse_judge(text: str) -> rank_pb2.JudgeSpec:
    """A judge from one string, as `tierank rank --judge` takes it: PROVIDER[:MODEL] and, after
    a `?`, `&`-separated KEY=VALUE pairs, e.g. "openai-compatible:qwen?temperature=0&weight=2".

    The keys of `JUDGE_KEYS` (weight, name, the JudgeParameters fields) set those fields; any
    other key is a provider option (`parameters.options`). Raises ValueError naming the
    offending key.
    """
    spec, _, query = text.partition("?")
    if not spec.partition(":")[0]:
        raise ValueError(f"judge {text!r} has no provider; expected {JUDGE_SYNTAX}")
    fields: dict[str, Any] = {}
    options: dict[str, str] = {}
    for pair in query.split("&") if query else ():
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise ValueError(f"judge {text!r}: expected KEY=VALUE after '?', got {pair!r}")
        if key in fields or key in options:
            raise ValueError(f"judge {text!r}: key {key!r} given twice")
        if key not in JUDGE_KEYS:
            options[key] = value
            continue
        if key == "weight" and value == QUALIFIED_WEIGHT:
            fields["weight_from_qualification"] = True
            continue
        convert, expected = JUDGE_KEYS[key]
        try:
            fields[key] = convert(value)
        except (ValueError, KeyError):
            raise ValueError(f"judge {text!r}: {key} must be {expected}, not {value!r}") from None
    return judge(spec, options=options, **fields)


def api_default_judge_name(spec: rank_pb2.JudgeSpec) -> str:
    """The name the API gives a judge whose spec names none (rank.proto, JudgeSpec.name):
    "provider/model", or "provider" without a model."""
    return f"{spec.provider}/{spec.model}" if spec.model else spec.provider


def sampled(judges: Iterable[rank_pb2.JudgeSpec], samples: int) -> list[rank_pb2.JudgeSpec]:
    """Each judge listed `samples` times, named NAME#1 .. NAME#n (permutation self-consistency).

    The copies are separate judges to the server: each sees every batch in its own shuffle and
    votes with the judge's weight, so a judge whose single answers are unreliable is outvoted
    by its own majority. With the adaptive ensemble, copies beyond the quorum are asked only
    where the quorum disagrees on a pair that matters.
    """
    if samples < 1:
        raise ValueError(f"samples per judge must be at least 1, not {samples}")
    if samples == 1:
        return list(judges)
    copies = []
    for spec in judges:
        name = spec.name or api_default_judge_name(spec)
        for index in range(1, samples + 1):
            copy = rank_pb2.JudgeSpec()
            copy.CopyFrom(spec)
            copy.name = f"{name}#{index}"
            copies.append(copy)
    return copies


def candidate(id: str, text: str, metadata: Mapping[str, Any] | None = None) -> rank_pb2.Candidate:
    """One candidate; metadata values are stringified because the wire map is string → string."""
    return rank_pb2.Candidate(
        id=str(id), text=text, metadata={str(k): str(v) for k, v in (metadata or {}).items()}
    )


def candidate_from_dict(record: Mapping[str, Any]) -> rank_pb2.Candidate:
    """A candidate from `{"id", "text", "metadata"?}` or `{"docid", "contents"}`."""
    id_value = _first_present(record, _ID_KEYS)
    text = _first_present(record, _TEXT_KEYS)
    if id_value is None or text is None:
        raise ValueError(
            f"candidate needs one of {_ID_KEYS} and one of {_TEXT_KEYS}; got keys {sorted(record)}"
        )
    return candidate(id_value, str(text), record.get("metadata"))


def job_spec(
    query: str,
    candidates: Iterable[rank_pb2.Candidate | Mapping[str, Any]],
    *,
    judges: Iterable[str | rank_pb2.JudgeSpec] = ("lexical",),
    rubric: str = "",
    batch_size: int | None = None,
    top_k: int = 0,
    max_in_flight: int | None = None,
    seed: int = 0,
    ensemble: str = "all",
    quorum: int | None = None,
    samples_per_judge: int = 1,
    max_judge_calls: int = 0,
    max_input_tokens: int = 0,
    max_cost_usd: float = 0.0,
    deadline_seconds: float = 0.0,
    allow_unqualified_judges: bool = False,
) -> rank_pb2.JobSpec:
    """A complete job spec. Unset optional fields keep the server's defaults.

    A judge given as a string is read by `parse_judge` ("oracle", "openai:gpt-4.1-mini",
    "openai-compatible:qwen?temperature=0"). `samples_per_judge` > 1 lists every judge that
    many times (see `sampled`).

    Validation is the server's job (it answers INVALID_ARGUMENT with field violations); only
    what cannot be expressed on the wire at all (an unknown ensemble name, fewer than one
    sample per judge) is rejected here.
    """
    try:
        ensemble_mode = ENSEMBLE_MODES[ensemble]
    except KeyError:
        raise ValueError(
            f"ensemble must be one of {sorted(ENSEMBLE_MODES)}, not {ensemble!r}"
        ) from None
    spec = rank_pb2.JobSpec(
        query=query,
        candidates=[
            c if isinstance(c, rank_pb2.Candidate) else candidate_from_dict(c) for c in candidates
        ],
        rubric=rubric,
        judges=sampled(
            [j if isinstance(j, rank_pb2.JudgeSpec) else parse_judge(j) for j in judges],
            samples_per_judge,
        ),
        top_k=top_k,
        seed=seed,
        ensemble_mode=ensemble_mode,
        budget=rank_pb2.Budget(
            max_judge_calls=max_judge_calls,
            max_input_tokens=max_input_tokens,
            max_cost_usd=max_cost_usd,
        ),
        deadline_seconds=deadline_seconds,
        allow_unqualified_judges=allow_unqualified_judges,
    )
    for field_name, value in (
        ("batch_size", batch_size),
        ("max_in_flight", max_in_flight),
        ("quorum", quorum),
    ):
        if value is not None:
            setattr(spec, field_name, value)
    return spec


def _first_present(record: Mapping[str, Any], keys: tuple[str, ...]) -> Any:
    for key in keys:
        if record.get(key) is not None:
            return record[key]
    return None
