"""`tierank watch NAME`: follow a job's events, or an operation's progress, one line each,
until it ends."""

from __future__ import annotations

import argparse
import sys

from tierank.client._errors import TierankError
from tierank.client._names import job_name
from tierank.client._operations import OPERATION_NAME_PREFIX, describe_operation
from tierank.client._progress import PlainProgress, describe_event
from tierank.client._resume import ReconnectPolicy
from tierank.client.commands._shared import (
    EXIT_OK,
    EXIT_TIMED_OUT,
    add_reconnect_option,
    add_server_options,
    server_connection,
    stream_stopped,
)


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "watch",
        help="follow a job's events (or an operation's progress) until it ends",
        description="Print a job's events, one line each, from --after onwards. A lost"
        " connection (a server restart) is resumed from the last event printed, for up to"
        " --reconnect-for seconds; giving up prints the command that resumes. Given"
        ' "operations/ID" (a qualify or fill running on a server), print its progress at each'
        " change instead.",
    )
    parser.add_argument(
        "name", metavar="NAME", help='job name, "jobs/ID" or just ID; or "operations/ID"'
    )
    parser.add_argument(
        "--after",
        type=int,
        default=0,
        metavar="N",
        help="only events with sequence > N (default 0)",
    )
    parser.add_argument(
        "--timeout",
        type=float,
        default=None,
        help="stop following after this many seconds, the job going on, with exit status"
        f" {EXIT_TIMED_OUT} (default: never)",
    )
    add_reconnect_option(parser)
    add_server_options(parser)
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    reporter = PlainProgress(sys.stderr, reconnect_window=args.reconnect_for)
    last_sequence = args.after
    with (
        server_connection(args, resume_jobs=True) as connection,
        connection.client(
            reconnect=ReconnectPolicy(window=args.reconnect_for),
            on_reconnect=reporter.on_reconnect,
        ) as client,
    ):
        if args.name.startswith(OPERATION_NAME_PREFIX):
            for operation in client.watch_operation(args.name, timeout=args.timeout):
                print(describe_operation(operation), flush=True)
            return EXIT_OK
        name = job_name(args.name)
        try:
            for event in client.watch_job(name, args.after, timeout=args.timeout):
                print(describe_event(event), flush=True)
                last_sequence = event.sequence
        except TierankError as error:
            raise stream_stopped(error, name, last_sequence, args) from None
    return EXIT_OK
