"""Human-facing names for wire values: job names, states, completion reasons."""

from __future__ import annotations

from typing import cast

from tierank.client._spec import api_default_judge_name
from tierank.resources import (
    JOB_COLLECTION,
    QUALIFICATION_COLLECTION,
    STUDY_COLLECTION,
    VERDICT_COLLECTION,
)
from tierank.v1 import rank_pb2

JOB_NAME_PREFIX = f"{JOB_COLLECTION}/"


def job_name(name_or_id: str) -> str:
    """Accept "jobs/abc" or just "abc"."""
    return name_or_id if name_or_id.startswith(JOB_NAME_PREFIX) else JOB_NAME_PREFIX + name_or_id


QUALIFICATION_NAME_PREFIX = f"{QUALIFICATION_COLLECTION}/"


def qualification_name(name_or_id: str) -> str:
    """Accept "qualifications/abc" or just "abc"."""
    if name_or_id.startswith(QUALIFICATION_NAME_PREFIX):
        return name_or_id
    return QUALIFICATION_NAME_PREFIX + name_or_id


def job_view(full: bool) -> rank_pb2.JobView:
    """The AIP-157 view to ask for: BASIC leaves out candidate texts and metadata."""
    return rank_pb2.JOB_VIEW_FULL if full else rank_pb2.JOB_VIEW_BASIC


def verdict_name(job: str, call_id: str) -> str:
    """The verdict resource name: "jobs/abc/verdicts/b0.j1"."""
    return f"{job_name(job)}/{VERDICT_COLLECTION}/{call_id}"


def parse_state(state: str | int | None) -> rank_pb2.JobState:
    """A JobState from "running", "JOB_STATE_RUNNING" or the enum value; None means any."""
    # protoc's stubs type an enum's constants as the enum, but its numbers (and Value()) as int.
    if state is None:
        return rank_pb2.JOB_STATE_UNSPECIFIED
    if isinstance(state, int):
        return cast(rank_pb2.JobState, state)
    full = state.upper()
    if not full.startswith("JOB_STATE_"):
        full = "JOB_STATE_" + full
    try:
        return cast(rank_pb2.JobState, rank_pb2.JobState.Value(full))
    except ValueError:
        raise ValueError(f"unknown job state {state!r}; one of {', '.join(STATE_NAMES)}") from None


def state_name(state: int) -> str:
    """ "running" for JOB_STATE_RUNNING."""
    return rank_pb2.JobState.Name(state).removeprefix("JOB_STATE_").lower()


def reason_name(reason: int) -> str:
    """ "settled" for COMPLETION_REASON_SETTLED."""
    return rank_pb2.CompletionReason.Name(reason).removeprefix("COMPLETION_REASON_").lower()


def status_text(state: int, reason: int) -> str:
    """ "succeeded (settled)", "running", "cancelled" (not "cancelled (cancelled)")."""
    text = state_name(state)
    if reason and reason_name(reason) != text:
        text += f" ({reason_name(reason)})"
    return text


STATE_NAMES = tuple(
    state_name(value)
    for value in rank_pb2.JobState.values()
    if value != rank_pb2.JOB_STATE_UNSPECIFIED
)


def abandoned_note(stats: rank_pb2.JobStats) -> str:
    """The suffix ", N abandoned" for a job that ended with calls unanswered; else empty."""
    return f", {stats.abandoned_calls} abandoned" if stats.abandoned_calls else ""


def prompt_cache_note(usage: rank_pb2.JobStats | rank_pb2.Usage) -> str:
    """ " (prompt cache: N read, M written)" when the provider's prompt cache served or stored
    part of the input tokens (each charged at its own price); else empty."""
    if not (usage.cached_input_tokens or usage.cache_write_input_tokens):
        return ""
    return (
        f" (prompt cache: {usage.cached_input_tokens} read, "
        f"{usage.cache_write_input_tokens} written)"
    )


def admission_notes(job: rank_pb2.Job) -> list[str]:
    """ "judge J: NOTE" for each judge whose admission says more than its qualification
    (JudgeSpec.admission_note): one admitted only by allow_unqualified_judges, or a new judge
    that differs from a refused one only by options."""
    return [
        f"judge {judge.name or api_default_judge_name(judge)}: {judge.admission_note}"
        for judge in job.spec.judges
        if judge.admission_note
    ]


def unqualified_note(stats: rank_pb2.JobStats) -> str:
    """ "; judge J admitted by allow_unqualified_judges: ..." for each judge that ran only
    because the job insisted, though found no better than chance (JudgeStats)."""
    return "".join(
        f"; judge {judge.judge} {judge.admission_note}"
        for judge in stats.judges
        if judge.admitted_unqualified
    )


def position_bias_note(stats: rank_pb2.JobStats) -> str:
    """ "; judge J follows shown positions (...)" for each judge flagged as position-biased:
    how far its answers follow the shown order (mean tau), and where its first pick had been
    shown (0 first, 1 last; a judge preferring the last-shown passages is near 1)."""
    return "".join(
        f"; judge {judge.judge} follows shown positions (mean tau"
        f" {judge.position_bias.mean_tau:+.2f} over {judge.position_bias.verdicts} verdicts,"
        f" {'reversing' if judge.position_bias.mean_tau < 0 else 'repeating'} the shown order;"
        f" first pick shown at {judge.position_bias.first_pick_position:.2f} from first (0) to"
        " last (1), 0.50 by chance)"
        for judge in stats.judges
        if judge.position_bias.biased
    )


STUDY_NAME_PREFIX = f"{STUDY_COLLECTION}/"


def study_name(name_or_id: str) -> str:
    """Accept "studies/abc" or just "abc"."""
    return (
        name_or_id if name_or_id.startswith(STUDY_NAME_PREFIX) else STUDY_NAME_PREFIX + name_or_id
    )
