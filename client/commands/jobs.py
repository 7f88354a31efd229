"""`tierank jobs`: list jobs as a table."""

from __future__ import annotations

import argparse

from rich import box
from rich.table import Table

from tierank import limits
from tierank.client._names import STATE_NAMES, reason_name, state_name
from tierank.client.commands._shared import (
    EXIT_OK,
    add_server_options,
    positive_int,
    server_connection,
    table_console,
)


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "jobs", help="list jobs", description="List jobs, newest first as the server orders them."
    )
    parser.add_argument("--state", choices=STATE_NAMES, help="only jobs in this state")
    parser.add_argument(
        "--page-size",
        type=positive_int,
        default=limits.DEFAULT_PAGE_SIZE,
        help=f"jobs per request (default {limits.DEFAULT_PAGE_SIZE},"
        f" at most {limits.MAX_JOBS_PAGE_SIZE})",
    )
    parser.add_argument(
        "--limit", type=positive_int, default=None, help="show at most this many jobs"
    )
    parser.add_argument("--timeout", type=float, default=30.0, help="seconds per page request")
    add_server_options(parser)
    parser.set_defaults(handler=run)


_COLUMNS = ("name", "state", "reason", "candidates", "events", "created", "query")
# Shown before the query when a listed job has one: the server that made it was tracing.
_TRACE_COLUMN = "trace"
# What rich adds to each column of a SIMPLE_HEAD table: a space each side and a separator.
_CELL_OVERHEAD = 3
_MIN_QUERY_WIDTH = 10


def run(args: argparse.Namespace) -> int:
    rows: list[tuple[str, ...]] = []
    with server_connection(args) as connection, connection.client() as client:
        jobs = client.list_jobs(state=args.state, page_size=args.page_size, timeout=args.timeout)
        for count, job in enumerate(jobs, start=1):
            rows.append(
                (
                    job.name,
                    state_name(job.state),
                    reason_name(job.completion_reason) if job.completion_reason else "",
                    str(job.candidate_count),
                    str(job.last_sequence),
                    job.create_time.ToDatetime().strftime("%Y-%m-%d %H:%M:%S")
                    if job.create_time.seconds
                    else "",
                    job.trace_id,
                    " ".join(job.query.split()),
                )
            )
            if args.limit is not None and count >= args.limit:
                break
    if not rows:
        print(f"no {args.state} jobs" if args.state else "no jobs")
        return EXIT_OK
    columns: tuple[str, ...] = _COLUMNS
    if any(row[-2] for row in rows):
        columns = (*_COLUMNS[:-1], _TRACE_COLUMN, _COLUMNS[-1])
    else:
        rows = [(*row[:-2], row[-1]) for row in rows]
    console = table_console()
    # One line per job, for grep and awk: on a terminal only the query gives way, cut rather
    # than wrapped; in a pipe nothing is cut.
    widths = [max(len(column), *(len(row[i]) for row in rows)) for i, column in enumerate(columns)]
    spare = console.width - sum(widths[:-1]) - _CELL_OVERHEAD * len(columns) - 1
    table = Table(box=box.SIMPLE_HEAD)
    for column in columns[:-1]:
        table.add_column(column, no_wrap=True)
    query_width = max(_MIN_QUERY_WIDTH, spare) if console.is_terminal else None
    table.add_column(columns[-1], no_wrap=True, overflow="ellipsis", max_width=query_width)
    for row in rows:
        table.add_row(*row)
    console.print(table)
    return EXIT_OK
