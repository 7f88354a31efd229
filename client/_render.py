"""Final results of a job as a table, JSON, or a TREC run file.

In top-K mode the server settles only the top K: a candidate beyond it is settled once it
provably cannot reach the top K, which says nothing about its order among the others beyond
it. Every output therefore shows the tiers from the one that starts past position K onwards as
one unordered group, "outside the top K" (`outside_top_k` in JSON, one tied score in TREC).

TREC runs have no notion of ties, so tiers are flattened: `rank` is the position in the
flattened tiers (1, 2, 3, ...), and every member of a tier gets the same score, the number of
tiers below it plus one (best tier highest). trec_eval orders by score and breaks equal scores
by docid, so within a tier its order is trec_eval's own, exactly as for any tied run.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, TextIO

from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import Message
from rich import box
from rich.table import Table
from rich.text import Text

from tierank.client._console import Console
from tierank.client._names import (
    abandoned_note,
    position_bias_note,
    prompt_cache_note,
    reason_name,
    state_name,
    status_text,
    unqualified_note,
)
from tierank.v1 import rank_pb2

FORMATS = ("table", "json", "trec")
# Tables written to a pipe or file: as wide as this unless $COLUMNS says otherwise (rich would
# use 80 and squeeze every column).
PIPE_WIDTH = 120
# The tier column plus the padding of four columns.
_FIXED_COLUMNS_WIDTH = 4 + 4 * 3
_MIN_TEXT_WIDTH = 20


@dataclass(frozen=True)
class ShownTier:
    """A tier as the outputs show it: one of the server's, or the group outside the top K."""

    rank: int
    settled: bool
    candidate_ids: tuple[str, ...]
    outside_top_k: bool = False


def shown_tiers(job: rank_pb2.Job) -> list[ShownTier]:
    """The job's tiers, with every tier that starts past the top K merged into one group."""
    top_k = job.spec.top_k
    shown: list[ShownTier] = []
    outside: list[rank_pb2.Tier] = []
    position = 0
    for tier in job.tiers:
        if top_k and position >= top_k:
            outside.append(tier)
        else:
            shown.append(ShownTier(tier.rank, tier.settled, tuple(tier.candidate_ids)))
        position += len(tier.candidate_ids)
    if outside:
        shown.append(
            ShownTier(
                rank=outside[0].rank,
                settled=all(tier.settled for tier in outside),
                candidate_ids=tuple(i for tier in outside for i in tier.candidate_ids),
                outside_top_k=True,
            )
        )
    return shown


def write_result(
    job: rank_pb2.Job,
    output_format: str,
    out: TextIO,
    *,
    texts: Mapping[str, str],
    qid: str,
    run_tag: str,
    color: bool,
) -> None:
    if output_format == "json":
        json.dump(job_summary(job), out, indent=2)
        out.write("\n")
    elif output_format == "trec":
        out.writelines(f"{line}\n" for line in trec_lines(shown_tiers(job), qid, run_tag))
    else:
        console = fit_console(
            Console(file=out, no_color=not color, highlight=False), on_terminal=color
        )
        console.print(tier_table(job, texts, console.width))
        console.print(summary_line(job))


def fit_console(console: Console, *, on_terminal: bool) -> Console:
    """Off a terminal, and unless $COLUMNS says otherwise, a wide fixed width (PIPE_WIDTH)."""
    if not on_terminal and not os.environ.get("COLUMNS"):
        console.width = PIPE_WIDTH
    return console


def job_summary(job: rank_pb2.Job) -> dict[str, Any]:
    return {
        "job": job.name,
        "state": state_name(job.state),
        "completion_reason": reason_name(job.completion_reason),
        "query": job.query,
        "top_k": job.spec.top_k,
        "tiers": [
            {
                "rank": t.rank,
                "settled": t.settled,
                "outside_top_k": t.outside_top_k,
                "candidate_ids": list(t.candidate_ids),
            }
            for t in shown_tiers(job)
        ],
        "stats": _plain(job.stats),
        **(
            {"error": {"code": job.error.code, "message": job.error.message}}
            if job.HasField("error")
            else {}
        ),
    }


def _plain(message: Message) -> dict[str, Any]:
    """Fields to JSON values, numbers as numbers (proto3 JSON would quote every int64)."""

    plain: dict[str, Any] = {}
    for field in message.DESCRIPTOR.fields:
        current = getattr(message, field.name)
        nested = field.type == FieldDescriptor.TYPE_MESSAGE
        if field.is_repeated:
            plain[field.name] = [_plain(item) if nested else item for item in current]
        else:
            plain[field.name] = _plain(current) if nested else current
    return plain


def trec_lines(tiers: list[ShownTier], qid: str, run_tag: str) -> list[str]:
    lines = []
    position = 0
    for index, tier in enumerate(tiers):
        score = len(tiers) - index
        for candidate_id in tier.candidate_ids:
            position += 1
            lines.append(f"{qid} Q0 {candidate_id} {position} {score} {run_tag}")
    return lines


def tier_table(job: rank_pb2.Job, texts: Mapping[str, str], width: int) -> Table:
    table = Table(title=f"{job.name}: {job.query}", box=box.SIMPLE_HEAD, title_justify="left")
    tiers = shown_tiers(job)
    labels = [_settled_label(tier, job.spec.top_k) for tier in tiers]
    id_width = max(map(len, texts), default=2)
    label_width = max(map(len, ["settled", *labels]))
    # Only the text gives way when the terminal is narrow (rich would squeeze every column).
    text_width = max(_MIN_TEXT_WIDTH, width - id_width - label_width - _FIXED_COLUMNS_WIDTH)
    table.add_column("tier", justify="right", no_wrap=True)
    table.add_column("settled", no_wrap=True)
    table.add_column("id", no_wrap=True)
    table.add_column("text", overflow="ellipsis", no_wrap=True, max_width=text_width)
    for tier, label in zip(tiers, labels, strict=True):
        for position, candidate_id in enumerate(tier.candidate_ids):
            first = position == 0
            table.add_row(
                str(tier.rank) if first else "",
                label if first else "",
                candidate_id,
                Text(" ".join(texts.get(candidate_id, "").split())),
            )
    return table


def _settled_label(tier: ShownTier, top_k: int) -> str:
    if tier.outside_top_k:
        return f"outside top {top_k}"
    return "yes" if tier.settled else "no"


def summary_line(job: rank_pb2.Job) -> str:
    stats = job.stats
    line = (
        f"{status_text(job.state, job.completion_reason)}: "
        f"{stats.settled_count}/{stats.total_count} settled, {stats.judge_calls} judge calls"
        f" ({stats.failed_calls} failed, {stats.cached_calls} cached{abandoned_note(stats)}), "
        f"{stats.input_tokens} input{prompt_cache_note(stats)} / {stats.output_tokens} output "
        "tokens, "
        f"${stats.cost_usd:.4f}, critical path {stats.critical_path}, {stats.wall_seconds:.2f}s"
        f"{position_bias_note(stats)}{unqualified_note(stats)}"
    )
    if job.HasField("error") and job.error.message:
        line += f"\nerror: {job.error.message}"
    return line
