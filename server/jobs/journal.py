"""The payloads of a job's journal rows: what the job planned, in the order it planned it.

A journal is a list of rows, each a kind and a payload, replayed in order after a restart:

- "planner": the first row of a job: JSON `{"version": PLANNER_VERSION, "config": {...}}`, the
  TournamentConfig fields with the defaults resolved, so that replay plans with what the job
  was planned with, whatever today's defaults. Journals begun before it have no such row.
- "plan": the calls of one plan, JSON `[{"call_id", "batch", "judge", "presented", "depth"},
  ...]`, enough to resume them under another planner. Older rows are a list of call ids only.
- "verdict": a VerdictReceived message as stored; "disable": a judge's index in decimal.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from tierank.scheduler.types import Budget, JudgeCall, TournamentConfig


@dataclass(frozen=True)
class Planner:
    """Who planned a job, and with what."""

    version: int
    config: TournamentConfig


@dataclass(frozen=True)
class RecordedPlan:
    call_ids: list[str]
    # None for a row that names its calls only.
    calls: list[JudgeCall] | None


def encode_planner(version: int, config: TournamentConfig) -> bytes:
    return json.dumps({"version": version, "config": dataclasses.asdict(config)}).encode()


def decode_planner(payload: bytes) -> Planner:
    data = json.loads(payload)
    config = _known(TournamentConfig, data["config"])
    if "judge_weights" in config:
        config["judge_weights"] = tuple(config["judge_weights"])
    if "budget" in config:
        config["budget"] = Budget(**_known(Budget, config["budget"]))
    return Planner(data["version"], TournamentConfig(**config))


def encode_plan(calls: Sequence[JudgeCall]) -> bytes:
    return json.dumps([dataclasses.asdict(call) for call in calls]).encode()


def decode_plan(payload: bytes) -> RecordedPlan:
    entries = json.loads(payload)
    if all(isinstance(entry, str) for entry in entries):
        return RecordedPlan(entries, None)
    calls = [
        JudgeCall(
            call_id=entry["call_id"],
            batch=entry["batch"],
            judge=entry["judge"],
            presented=tuple(entry["presented"]),
            depth=entry["depth"],
        )
        for entry in entries
    ]
    return RecordedPlan([call.call_id for call in calls], calls)


def _known(kind: type, values: dict[str, Any]) -> dict[str, Any]:
    """The fields `kind` has. A row written by another version may lack some (they take their
    defaults) or hold more (dropped): its planner version differs too, so its calls are
    adopted, not planned again."""
    names = {f.name for f in dataclasses.fields(kind)}
    return {name: value for name, value in values.items() if name in names}
