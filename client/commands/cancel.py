"""`tierank cancel NAME`: cancel a running job (its tiers so far are kept), or an operation
(`tierank qualify` or `fill` started on a server)."""

from __future__ import annotations

import argparse

from tierank.client._names import status_text
from tierank.client._operations import OPERATION_NAME_PREFIX, describe_operation
from tierank.client.commands._shared import EXIT_OK, add_server_options, server_connection


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "cancel",
        help="cancel a job or an operation",
        description="Cancel a job (its tiers so far are kept), or an operation "
        '("operations/ID", a qualify or fill running on a server: its judge calls stop).',
    )
    parser.add_argument(
        "name", metavar="NAME", help='job name, "jobs/ID" or just ID; or "operations/ID"'
    )
    parser.add_argument(
        "--timeout", type=float, default=30.0, help="seconds to wait for the server"
    )
    add_server_options(parser)
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    with server_connection(args) as connection, connection.client() as client:
        if args.name.startswith(OPERATION_NAME_PREFIX):
            print(describe_operation(client.cancel_operation(args.name, timeout=args.timeout)))
            return EXIT_OK
        job = client.cancel_job(args.name, timeout=args.timeout)
    print(f"{job.name}: {status_text(job.state, job.completion_reason)}")
    return EXIT_OK
