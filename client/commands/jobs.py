"""`tierank jobs`: list jobs as a table."""

from __future__ import annotations

import argparse

from rich import box
from rich.table import Table

from tierank.client._names import STATE_NAMES, reason_name, state_name
from tierank.client.commands._shared import (
    EXIT_OK,
    add_server_option,
    positive_int,
    server_address,
    table_console,
)
from tierank.client.sync import Client


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "jobs", help="list jobs", description="List jobs, newest first as the server orders them."
    )
    parser.add_argument("--state", choices=STATE_NAMES, help="only jobs in this state")
    parser.add_argument(
        "--page-size", type=positive_int, default=50, help="jobs per request (default 50)"
    )
    parser.add_argument(
        "--limit", type=positive_int, default=None, help="show at most this many jobs"
    )
    parser.add_argument("--timeout", type=float, default=30.0, help="seconds per page request")
    add_server_option(parser)
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    table = Table(box=box.SIMPLE_HEAD)
    for column in ("name", "state", "reason", "candidates", "events", "created", "query"):
        table.add_column(column, no_wrap=column != "query")
    with Client(server_address(args)) as client:
        jobs = client.list_jobs(state=args.state, page_size=args.page_size, timeout=args.timeout)
        for count, job in enumerate(jobs, start=1):
            table.add_row(
                job.name,
                state_name(job.state),
                reason_name(job.completion_reason) if job.completion_reason else "",
                str(job.candidate_count),
                str(job.last_sequence),
                job.create_time.ToDatetime().strftime("%Y-%m-%d %H:%M:%S")
                if job.create_time.seconds
                else "",
                job.query,
            )
            if args.limit is not None and count >= args.limit:
                break
    console = table_console()
    console.print(table)
    return EXIT_OK
