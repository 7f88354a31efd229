"""The payloads of a job's journal rows: what the job planned, in the order it planned it.

A journal is a list of rows, each a kind and a payload, replayed in order after a restart:

- "planner": the first row of a job: JSON `{"version": PLANNER_VERSION, "config": {...}}`, the
  TournamentConfig fields with the defaults resolved, so that replay plans with what the job
  was planned with, whatever today's defaults. Journals begun before it have no such row.
  `"continues": true` marks a job that continues another's tournament over a larger pool (a
  study's query judged again after a run was added): the plans that follow were made for the
  other pool, so they are adopted, never planned again.
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

from tierank.scheduler import PLANNER_VERSION
from tierank.scheduler.types import Budget, JudgeCall, TournamentConfig
from tierank.server.storage.base import JournalRow
from tierank.v1 import rank_pb2


@dataclass(frozen=True)
class Planner:
    """Who planned a job, and with what; `continues`: its first plans are another job's."""

    version: int
    config: TournamentConfig
    continues: bool = False


@dataclass(frozen=True)
class RecordedPlan:
    call_ids: list[str]
    # None for a row that names its calls only.
    calls: list[JudgeCall] | None


def encode_planner(version: int, config: TournamentConfig, *, continues: bool = False) -> bytes:
    header: dict[str, Any] = {"version": version, "config": dataclasses.asdict(config)}
    if continues:
        header["continues"] = True
    return json.dumps(header).encode()


def decode_planner(payload: bytes) -> Planner:
    data = json.loads(payload)
    config = _known(TournamentConfig, data["config"])
    if "judge_weights" in config:
        config["judge_weights"] = tuple(config["judge_weights"])
    if "budget" in config:
        config["budget"] = Budget(**_known(Budget, config["budget"]))
    return Planner(data["version"], TournamentConfig(**config), data.get("continues", False))


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


def continued_journal(previous: Sequence[JournalRow], config: TournamentConfig) -> list[JournalRow]:
    """The journal a job starts with when it continues `previous`'s tournament (the journal of
    a job over a pool its own contains) under `config`: a planner row saying so, then each of
    `previous`'s calls that has a verdict, planned and answered in the order it was.

    A call with no verdict (abandoned when that job ended early) is left out, and so is a plan
    recorded as call ids only (too old to adopt) with its verdicts: the new job plans what it
    still needs. Disabled judges are not carried over: the new job tries every judge again.
    """
    answered: set[str] = set()
    for row in previous:
        if row.kind == "verdict":
            answered.add(rank_pb2.VerdictReceived.FromString(row.payload).call_id)
    payloads = [("planner", encode_planner(PLANNER_VERSION, config, continues=True))]
    adopted: set[str] = set()
    for row in previous:
        if row.kind == "plan":
            calls = decode_plan(row.payload).calls or []
            kept = [call for call in calls if call.call_id in answered]
            if kept:
                adopted.update(call.call_id for call in kept)
                payloads.append(("plan", encode_plan(kept)))
        elif (
            row.kind == "verdict"
            and rank_pb2.VerdictReceived.FromString(row.payload).call_id in adopted
        ):
            payloads.append(("verdict", row.payload))
    return [JournalRow(index, kind, payload) for index, (kind, payload) in enumerate(payloads)]


def _known(kind: type, values: dict[str, Any]) -> dict[str, Any]:
    """The fields `kind` has. A row written by another version may lack some (they take their
    defaults) or hold more (dropped): its planner version differs too, so its calls are
    adopted, not planned again."""
    names = {f.name for f in dataclasses.fields(kind)}
    return {name: value for name, value in values.items() if name in names}
