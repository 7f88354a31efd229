"""A job's events as they stream: a live rich display on a terminal, plain lines elsewhere."""

from __future__ import annotations

import time
from types import TracebackType
from typing import TextIO

from rich import box
from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text

from tierank.client._errors import TierankError
from tierank.client._names import (
    abandoned_note,
    admission_notes,
    position_bias_note,
    prompt_cache_note,
    reason_name,
    unqualified_note,
)
from tierank.v1 import rank_pb2

_TOP_TIERS_SHOWN = 5
_IDS_PER_TIER_SHOWN = 8


def describe_event(event: rank_pb2.JobEvent) -> str:
    """One line per event, for logs, pipes and `tierank watch`."""
    kind = event.WhichOneof("kind")
    head = f"#{event.sequence} {kind}"
    if kind == "accepted":
        job = event.accepted.job
        notes = "".join(f"; {note}" for note in admission_notes(job))
        return f"{head} {job.name}: {job.candidate_count} candidates, query {job.query!r}{notes}"
    if kind == "verdict":
        verdict = event.verdict
        where = f"{head} call {verdict.call_id} batch {verdict.batch} judge {verdict.judge}"
        if verdict.failed:
            return f"{where}: failed ({verdict.failure_reason})"
        usage = verdict.usage
        return (
            f"{where}: ordered {len(verdict.ordering)}/{len(verdict.presented)}"
            f"{' (cached)' if verdict.cached else ''}, {usage.input_tokens} in"
            f"{prompt_cache_note(usage)} /"
            f" {usage.output_tokens} out tokens, {usage.latency_seconds:.2f}s"
        )
    if kind == "tiers_updated":
        update = event.tiers_updated
        return (
            f"{head} {update.settled_count}/{update.total_count} settled;"
            f" top {format_tiers(update.tiers[:3])}{position_bias_note(update.stats)}"
        )
    if kind == "completed":
        completed = event.completed
        return (
            f"{head} ({reason_name(completed.reason)}): {completed.stats.settled_count}/"
            f"{completed.stats.total_count} settled, {completed.stats.judge_calls} judge calls"
            f"{abandoned_note(completed.stats)}, critical path {completed.stats.critical_path}"
            f"{position_bias_note(completed.stats)}{unqualified_note(completed.stats)}"
        )
    if kind == "failed":
        return f"{head}: {event.failed.error.message}"
    if kind == "judge_stalled":
        return f"{head} {stall_note(event.judge_stalled)}"
    return head


def stall_note(stalled: rank_pb2.JudgeStalled, waited_s: float | None = None) -> str:
    """What a JudgeStalled event says, the wait as of `waited_s` (default: the event's)."""
    waited = stalled.waiting_seconds if waited_s is None else waited_s
    usual = (
        f"its median call took {stalled.median_latency_seconds:.1f}s"
        if stalled.HasField("median_latency_seconds")
        else "no answer from it yet in this job"
    )
    return (
        f"{stalled.judge}: a call has waited {waited:.0f}s without an answer ({usual});"
        f" it fails after {stalled.time_limit_seconds:.0f}s"
    )


def format_tiers(tiers: list[rank_pb2.Tier]) -> str:
    return " > ".join(_format_tier(tier) for tier in tiers)


def _format_tier(tier: rank_pb2.Tier) -> str:
    ids = list(tier.candidate_ids)
    shown = " ".join(ids[:_IDS_PER_TIER_SHOWN])
    more = f" +{len(ids) - _IDS_PER_TIER_SHOWN}" if len(ids) > _IDS_PER_TIER_SHOWN else ""
    return f"[{shown}{more}]{'' if tier.settled else '?'}"


class PlainProgress:
    """Line per event, for when output is not a terminal."""

    def __init__(self, out: TextIO, *, reconnect_window: float) -> None:
        self._out = out
        self._reconnect_window = reconnect_window

    def __enter__(self) -> PlainProgress:
        return self

    def __exit__(self, *exc_info: object) -> None:
        pass

    def on_event(self, event: rank_pb2.JobEvent) -> None:
        print(describe_event(event), file=self._out, flush=True)

    def on_stats(self, stats: rank_pb2.JobStats) -> None:
        pass

    def on_reconnect(self, attempt: int, error: TierankError) -> None:
        # One line per loss, not per attempt: a server restart takes many quiet attempts.
        if attempt == 1:
            print(
                f"connection lost ({error.code.name}); resuming for up to"
                f" {self._reconnect_window:g}s (--reconnect-for)",
                file=self._out,
                flush=True,
            )


class LiveProgress:
    """A live panel: settled/total bar, calls, tokens, cost, critical path, the top tiers."""

    def __init__(self, console: Console) -> None:
        self._bar = Progress(
            TextColumn("settled"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=console,
        )
        self._task = self._bar.add_task("settled", total=None)
        self._live = Live(self, console=console, refresh_per_second=8, transient=False)
        self._tiers: list[rank_pb2.Tier] = []
        self._calls = self._failed = self._input_tokens = self._output_tokens = 0
        self._cost = 0.0
        self._critical_path: int | None = None
        self._notice = ""
        # Per judge, its latest JudgeStalled event and when it came (time.monotonic()): shown,
        # its wait counting on, until the judge's next verdict.
        self._stalls: dict[str, tuple[rank_pb2.JudgeStalled, float]] = {}

    def __enter__(self) -> LiveProgress:
        self._live.__enter__()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self._live.__exit__(exc_type, exc, traceback)

    def on_event(self, event: rank_pb2.JobEvent) -> None:
        kind = event.WhichOneof("kind")
        if kind == "accepted":
            self._bar.update(self._task, total=event.accepted.job.candidate_count)
            for note in admission_notes(event.accepted.job):
                self._live.console.print(Text(f"note: {note}"))
        elif kind == "verdict":
            self._count_verdict(event.verdict)
            self._stalls.pop(event.verdict.judge, None)
        elif kind == "judge_stalled":
            self._stalls[event.judge_stalled.judge] = (event.judge_stalled, time.monotonic())
        elif kind == "tiers_updated":
            update = event.tiers_updated
            self._tiers = list(update.tiers)
            self._bar.update(self._task, completed=update.settled_count, total=update.total_count)
        elif kind in ("completed", "failed"):
            self._stalls.clear()
            final = event.completed if kind == "completed" else event.failed
            self.on_stats(final.stats)
            if kind == "completed":
                self._tiers = list(event.completed.tiers)
            self._notice = describe_event(event)
        self._live.refresh()

    def on_stats(self, stats: rank_pb2.JobStats) -> None:
        """Authoritative totals from the server (polled, and in the terminal event)."""
        self._calls, self._failed = stats.judge_calls, stats.failed_calls
        self._input_tokens, self._output_tokens = stats.input_tokens, stats.output_tokens
        self._cost, self._critical_path = stats.cost_usd, stats.critical_path
        if stats.total_count:
            self._bar.update(self._task, completed=stats.settled_count, total=stats.total_count)

    def on_reconnect(self, attempt: int, error: TierankError) -> None:
        self._notice = f"connection lost ({error.code.name}); reconnecting, attempt {attempt}"

    def _count_verdict(self, verdict: rank_pb2.VerdictReceived) -> None:
        # A cached verdict was paid for by an earlier job: not a call, as in the server's stats.
        if verdict.cached:
            return
        self._calls += 1
        self._failed += verdict.failed
        self._input_tokens += verdict.usage.input_tokens
        self._output_tokens += verdict.usage.output_tokens
        self._cost += verdict.usage.cost_usd

    def __rich__(self) -> Group:
        critical = "?" if self._critical_path is None else str(self._critical_path)
        stats = (
            f"calls {self._calls} ({self._failed} failed)   tokens {self._input_tokens} in /"
            f" {self._output_tokens} out   cost ${self._cost:.4f}   critical path {critical}"
        )
        tiers = Table(box=box.SIMPLE, show_header=True, pad_edge=False)
        tiers.add_column("tier", justify="right")
        tiers.add_column("")
        tiers.add_column("candidates")
        for tier in self._tiers[:_TOP_TIERS_SHOWN]:
            # Text, not markup: "[id]" would be read as a style tag.
            tiers.add_row(
                str(tier.rank), "settled" if tier.settled else "open", Text(_format_tier(tier))
            )
        parts: list[RenderableType] = [self._bar, Text(stats)]
        now = time.monotonic()
        for stalled, since in self._stalls.values():
            waited = stalled.waiting_seconds + now - since
            parts.append(Text(f"stalled: {stall_note(stalled, waited)}", style="yellow"))
        parts.append(tiers)
        if self._notice:
            parts.append(Text(self._notice))
        return Group(*parts)
