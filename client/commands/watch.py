"""`tierank watch NAME`: follow a job's events, or an operation's progress, one line each,
until it ends."""

from __future__ import annotations

import argparse
import sys

from tierank.client._operations import OPERATION_NAME_PREFIX, describe_operation
from tierank.client._progress import PlainProgress, describe_event
from tierank.client.commands._shared import EXIT_OK, add_server_options, server_connection


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "watch",
        help="follow a job's events (or an operation's progress) until it ends",
        description="Print a job's events, one line each, from --after onwards, reconnecting"
        ' transparently if the connection drops. Given "operations/ID" (a qualify or fill'
        " running on a server), print its progress at each change instead.",
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
        help="give up after this many seconds (default: never)",
    )
    add_server_options(parser)
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    reporter = PlainProgress(sys.stderr)
    with (
        server_connection(args) as connection,
        connection.client(on_reconnect=reporter.on_reconnect) as client,
    ):
        if args.name.startswith(OPERATION_NAME_PREFIX):
            for operation in client.watch_operation(args.name, timeout=args.timeout):
                print(describe_operation(operation), flush=True)
            return EXIT_OK
        for event in client.watch_job(args.name, args.after, timeout=args.timeout):
            print(describe_event(event), flush=True)
    return EXIT_OK
