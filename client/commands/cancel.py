"""`tierank cancel NAME`: cancel a running job; its tiers so far are kept."""

from __future__ import annotations

import argparse

from tierank.client._names import status_text
from tierank.client.commands._shared import EXIT_OK, add_server_options, server_connection


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "cancel", help="cancel a job", description="Cancel a job; its tiers so far are kept."
    )
    parser.add_argument("name", metavar="NAME", help='job name, "jobs/ID" or just ID')
    parser.add_argument(
        "--timeout", type=float, default=30.0, help="seconds to wait for the server"
    )
    add_server_options(parser)
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    with server_connection(args) as connection, connection.client() as client:
        job = client.cancel_job(args.name, timeout=args.timeout)
    print(f"{job.name}: {status_text(job.state, job.completion_reason)}")
    return EXIT_OK
