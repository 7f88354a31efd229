"""Reading the free-form `options` of a judge spec: unknown keys and bad numbers are refused."""

from __future__ import annotations

import math
from collections.abc import Mapping

from tierank.server.judges.base import JudgeConfigError


def refuse_unknown_options(options: Mapping[str, str], known: frozenset[str], judge: str) -> None:
    for key in sorted(set(options) - known):
        rule = f"unknown option for {judge} judges; known: {', '.join(sorted(known)) or 'none'}"
        raise JudgeConfigError(f"parameters.options.{key[:100]}", rule)


def float_option(
    options: Mapping[str, str],
    key: str,
    default: float,
    maximum: float = math.inf,
    *,
    lowest: float = 0.0,
) -> float:
    """A finite number from `lowest` (default 0) to `maximum`."""
    raw = options.get(key)
    if raw is None or raw == "":
        return default
    try:
        value = float(raw)
    except ValueError:
        rule = f"must be a number, got {raw[:40]!r}"
        raise JudgeConfigError(f"parameters.options.{key}", rule) from None
    if not (math.isfinite(value) and lowest <= value <= maximum):
        bound = (
            f"from {lowest:g} to {maximum:g}"
            if math.isfinite(maximum)
            else f"finite and at least {lowest:g}"
        )
        raise JudgeConfigError(f"parameters.options.{key}", f"must be a number {bound}")
    return value
