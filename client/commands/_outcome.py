"""What a finished job's result is worth to a script: `tierank rank`'s exit status and warning.

A job can end without error and still not answer the question: no judge answered (its tiers
are then just the input order), or it stopped before the tiers that were asked for settled.
Exit status 0 must mean "settled", so a shell script can trust a result it did not look at.
"""

from __future__ import annotations

from dataclasses import dataclass

from tierank.client._names import (
    abandoned_note,
    position_bias_note,
    reason_name,
    unqualified_note,
)
from tierank.client.commands._shared import (
    EXIT_BROKEN_PIPE,
    EXIT_INTERRUPTED,
    EXIT_NO_VERDICTS,
    EXIT_OK,
    EXIT_PROVISIONAL,
    EXIT_SERVER_ERROR,
    EXIT_TIMED_OUT,
    EXIT_USAGE,
)
from tierank.v1 import rank_pb2

EXIT_STATUS_HELP = (
    f"exit status: {EXIT_OK} the tiers asked for are settled; {EXIT_SERVER_ERROR} a server or"
    f" connection error, or the job failed; {EXIT_USAGE} a usage error; {EXIT_NO_VERDICTS} no"
    f" judge answered at all (the tiers are only the input order); {EXIT_PROVISIONAL} a"
    " provisional result: the job was cancelled, ran out of budget or time, lost its judges, or"
    f" had nothing left to ask before it settled. {EXIT_NO_VERDICTS} and {EXIT_PROVISIONAL}"
    f" print a warning on stderr and still write the result. {EXIT_TIMED_OUT}: --timeout ran"
    f" out; {EXIT_INTERRUPTED}: Ctrl-C (either way a job at --server goes on, and one on the"
    f" embedded server is cancelled; one line says which). {EXIT_BROKEN_PIPE}: the output was"
    " closed early (e.g. piped into head)."
)


@dataclass(frozen=True)
class Outcome:
    exit_code: int
    # One line for stderr; empty when the result is what was asked for.
    warning: str = ""


def outcome(job: rank_pb2.Job) -> Outcome:
    stats = job.stats
    if job.state == rank_pb2.JOB_STATE_FAILED:
        return Outcome(EXIT_SERVER_ERROR, f"{job.name} failed: {job.error.message}")
    # Judges the job ran only because it insisted: every result says so, settled or not.
    unqualified = unqualified_note(stats)
    answered = stats.judge_calls + stats.cached_calls - stats.failed_calls
    if answered <= 0:
        return Outcome(
            EXIT_NO_VERDICTS,
            f"warning: no verdict ({reason_name(job.completion_reason)}; {stats.failed_calls}"
            f" calls failed{abandoned_note(stats)}): {job.name} is not ranked, its tiers are the"
            f" input order{unqualified}",
        )
    if job.completion_reason != rank_pb2.COMPLETION_REASON_SETTLED:
        return Outcome(
            EXIT_PROVISIONAL,
            f"warning: provisional result ({reason_name(job.completion_reason)}):"
            f" {stats.settled_count}/{stats.total_count} settled in {job.name}"
            f"{position_bias_note(stats)}{unqualified}",
        )
    if unqualified:
        # Settled as asked (the override was asked for too), but on votes a qualification
        # found no better than chance: exit 0, and a warning no one can miss.
        return Outcome(
            EXIT_OK,
            f"warning: {job.name} settled with judges found no better than chance{unqualified}",
        )
    return Outcome(EXIT_OK)
