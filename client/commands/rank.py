"""`tierank rank`: rank a pool with judges, showing tiers live as they settle."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TextIO

import grpc

from tierank.client._console import Console
from tierank.client._errors import TierankError
from tierank.client._inputs import read_rubric
from tierank.client._pool import read_jsonl_pool, read_run_pool, read_topic
from tierank.client._progress import LiveProgress, PlainProgress
from tierank.client._render import FORMATS, write_result
from tierank.client._resume import EventCursor, ReconnectPolicy
from tierank.client.aio import AsyncClient
from tierank.client.commands._outcome import EXIT_STATUS_HELP, outcome
from tierank.client.commands._shared import (
    EXIT_INTERRUPTED,
    EXIT_TIMED_OUT,
    JOB_SPEC_FLAGS,
    CommandError,
    Connection,
    UsageError,
    add_allow_unqualified_option,
    add_budget_options,
    add_judging_options,
    add_reconnect_option,
    add_rubric_option,
    add_server_options,
    budget_options,
    goes_on,
    name_flags,
    ranking_spec,
    same_server,
    server_connection,
    stream_stopped,
)
from tierank.evaluation.rubric import DEFAULT_RUBRIC
from tierank.v1 import rank_pb2

_STATS_POLL_SECONDS = 0.5
# Ctrl-C on the embedded server: how long the cancel that stops the job may take.
_CANCEL_SECONDS = 10.0
_DEFAULT_QID = "1"
_REQUEST_FLAGS = {"request_id": "--request-id"}


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "rank",
        help="rank a candidate pool with judges",
        description="Rank candidates for one query. Candidates come from a pool (one passage"
        ' per line: {"id","text","metadata"?}, {"docid","contents"} or docid<TAB>text) or from'
        " a TREC run plus passages (the query's documents by score, as trec_eval orders them)."
        " Every file is read as every command reads it (README.md, Input files). Progress goes"
        " to stderr; the final tiers to stdout or --output.",
        epilog=EXIT_STATUS_HELP,
    )
    sources = parser.add_argument_group("candidates and query")
    sources.add_argument(
        "pool", nargs="?", type=Path, help="candidates: JSONL, or docid<TAB>text, per line"
    )
    sources.add_argument(
        "--run",
        type=Path,
        help="TREC run file (qid Q0 docid rank score tag): the --qid's documents, by score",
    )
    sources.add_argument(
        "--passages",
        type=Path,
        help="passages for --run (text and metadata): JSONL, or docid<TAB>text",
    )
    sources.add_argument(
        "--qid",
        help=f"query id: picks --run and --topics lines; TREC output qid (default {_DEFAULT_QID})",
    )
    sources.add_argument("--topics", type=Path, help="query texts: qid<TAB>text, or JSONL")
    sources.add_argument("--query", help="query text (instead of --topics)")
    add_rubric_option(sources, f"the server's definition: {DEFAULT_RUBRIC!r}")

    judging = parser.add_argument_group("judging")
    add_judging_options(judging, top_k_help="settle only the top K (default 0: full order)")
    add_budget_options(judging, "the job's")
    add_allow_unqualified_option(parser, judging, "rank", "a job")
    judging.add_argument(
        "--request-id",
        default="",
        help="idempotency key: rerunning with it never starts a second job",
    )

    output = parser.add_argument_group("output")
    output.add_argument(
        "--format", choices=FORMATS, default="table", help="result format (default table)"
    )
    output.add_argument("--output", type=Path, help="write the result here instead of stdout")
    output.add_argument("--run-tag", default="tierank", help="run tag for --format trec")

    connection = parser.add_argument_group("server")
    add_server_options(connection)
    connection.add_argument(
        "--timeout",
        type=float,
        help="stop waiting for the result after this many seconds, the job going on, with"
        f" exit status {EXIT_TIMED_OUT}",
    )
    add_reconnect_option(connection)
    name_flags(parser, {f"spec.{f}": flag for f, flag in JOB_SPEC_FLAGS.items()} | _REQUEST_FLAGS)
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    candidates, query = _read_inputs(args)
    spec = ranking_spec(args, query, candidates, read_rubric(args.rubric))
    budget, spec.deadline_seconds = budget_options(args)
    spec.budget.CopyFrom(budget)
    live = sys.stdout.isatty() and sys.stderr.isatty()
    progress = (
        LiveProgress(Console(stderr=True))
        if live
        else PlainProgress(sys.stderr, reconnect_window=args.reconnect_for)
    )
    followed = EventCursor()
    # The output is opened first: a path that cannot be written must not cost a judged job.
    with _open_output(args.output) as out:
        with server_connection(args) as connection, progress:
            try:
                job = asyncio.run(
                    _rank(connection, spec, args, progress, followed, poll_stats=live)
                )
            except KeyboardInterrupt:
                raise _left(connection, followed, args, "interrupted", EXIT_INTERRUPTED) from None
            except TierankError as error:
                raise _stream_ended(connection, followed, args, error) from None
        texts = {c.id: c.text for c in candidates}
        write_result(
            job,
            args.format,
            out,
            texts=texts,
            qid=args.qid or _DEFAULT_QID,
            run_tag=args.run_tag,
            color=out.isatty(),
        )
    result = outcome(job)
    if result.warning:
        print(f"tierank rank: {result.warning}", file=sys.stderr)
    return result.exit_code


async def _rank(
    connection: Connection,
    spec: rank_pb2.JobSpec,
    args: argparse.Namespace,
    progress: LiveProgress | PlainProgress,
    followed: EventCursor,
    *,
    poll_stats: bool,
) -> rank_pb2.Job:
    async with connection.async_client(
        reconnect=ReconnectPolicy(window=args.reconnect_for), on_reconnect=progress.on_reconnect
    ) as client:
        poller: asyncio.Task[None] | None = None
        try:
            async for event in client.rank(spec, request_id=args.request_id, timeout=args.timeout):
                progress.on_event(event)
                # The client drops repeated events, so each one is new: the cursor records it.
                followed.accept(event)
                if poll_stats and poller is None:
                    poller = asyncio.create_task(_poll_stats(client, followed.job, progress))
        finally:
            if poller is not None:
                poller.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await poller
        return await client.get_job(followed.job, timeout=args.timeout)


def _stream_ended(
    connection: Connection, followed: EventCursor, args: argparse.Namespace, error: TierankError
) -> Exception:
    timed_out = error.code == grpc.StatusCode.DEADLINE_EXCEEDED and args.timeout is not None
    if not followed.job and not timed_out:
        return error
    if followed.job and (args.server or not timed_out):
        return stream_stopped(error, followed.job, followed.last_sequence, args)
    # Our own --timeout, also while the server was still admitting the job (a busy model
    # server's model list): the command's timed-out exit, not a bare gRPC deadline.
    why = f"stopped after --timeout {args.timeout:g}s"
    return _left(connection, followed, args, why, EXIT_TIMED_OUT)


def _left(
    connection: Connection,
    followed: EventCursor,
    args: argparse.Namespace,
    why: str,
    exit_code: int,
) -> CommandError:
    """Ctrl-C or --timeout: a job on a --server goes on there (say how to follow or cancel
    it); one on the embedded server is cancelled, since that server stops with this command and
    the job would otherwise go on spending, unseen, whenever a later command starts it again."""
    if not followed.job:
        where = f"--server {args.server}" if args.server else "the embedded server"
        return CommandError(
            f"{why} before the job was named; `tierank jobs` on {where} lists it if it was created",
            exit_code,
        )
    name = followed.job
    if args.server:
        return goes_on(why, name, followed.last_sequence, args, exit_code)
    try:
        with connection.client() as client:
            client.cancel_job(name, timeout=_CANCEL_SECONDS)
    except TierankError as error:
        return CommandError(
            f"{why}; could not cancel {name} ({error.code.name}): it resumes when a later"
            f" command starts the embedded server; stop it with"
            f" `tierank cancel {name}{same_server(args)}`",
            exit_code,
        )
    return CommandError(
        f"{why}; cancelled {name}, since the embedded server stops with this command; its"
        f" tiers so far: `tierank watch {name}{same_server(args)}`",
        exit_code,
    )


async def _poll_stats(
    client: AsyncClient, name: str, progress: LiveProgress | PlainProgress
) -> None:
    # Events carry per-call usage but not the critical path; the job's stats do. Best effort:
    # a failed poll only leaves the display a little stale.
    while True:
        await asyncio.sleep(_STATS_POLL_SECONDS)
        with contextlib.suppress(TierankError):
            progress.on_stats((await client.get_job(name, timeout=_STATS_POLL_SECONDS * 4)).stats)


def _read_inputs(args: argparse.Namespace) -> tuple[list[rank_pb2.Candidate], str]:
    if (args.pool is None) == (args.run is None):
        raise UsageError("give either a JSONL pool or --run (with --passages and --qid)")
    if args.query is not None and args.topics is not None:
        raise UsageError("give either --query or --topics, not both")
    if args.run is not None:
        if args.passages is None or args.qid is None:
            raise UsageError("--run needs --passages and --qid")
        candidates = read_run_pool(args.run, args.passages, args.qid)
    else:
        candidates = read_jsonl_pool(args.pool)
    if args.topics is not None:
        if args.qid is None:
            raise UsageError("--topics needs --qid")
        return candidates, read_topic(args.topics, args.qid)
    if args.query is None:
        raise UsageError("give the query with --query (or --topics and --qid)")
    return candidates, args.query


@contextlib.contextmanager
def _open_output(path: Path | None) -> Iterator[TextIO]:
    if path is None:
        yield sys.stdout
        return
    try:
        out = open(path, "w", encoding="utf-8")  # noqa: SIM115 - closed below, errors kept apart
    except OSError as error:
        raise UsageError(f"cannot write {path}: {error.strerror}") from None
    with out:
        yield out
