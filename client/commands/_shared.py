"""What several subcommands need: the server options, exit codes, usage errors, a console."""

from __future__ import annotations

import argparse
import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

from rich.console import Console

from tierank.client._render import fit_console
from tierank.client._spec import parse_judge
from tierank.client.local_server import LocalServer
from tierank.client.sync import Client
from tierank.v1 import rank_pb2

EXIT_OK = 0
EXIT_SERVER_ERROR = 1
EXIT_USAGE = 2
# `tierank rank` only: the job ended, but its result is not what was asked for.
EXIT_NO_VERDICTS = 3
EXIT_PROVISIONAL = 4
# What a shell reports for a process killed by SIGPIPE (128 + 13), as for any Unix tool whose
# reader went away (`tierank watch J | head -5`).
EXIT_BROKEN_PIPE = 141

SERVER_ENV = "TIERANK_SERVER"
# How long a command waits for a --server that does not answer yet: long enough for one that
# is still starting (`tierank serve & tierank rank ...`), then it says "cannot reach" once.
CONNECT_TIMEOUT_ENV = "TIERANK_CONNECT_TIMEOUT"
DEFAULT_CONNECT_TIMEOUT_SECONDS = 10.0


class UsageError(Exception):
    """The command line is wrong in a way argparse cannot see (exit code 2)."""


def add_server_options(parser: argparse.ArgumentParser | argparse._ArgumentGroup) -> None:
    """--server and --db: a running server, or else an embedded one for the command's duration."""
    parser.add_argument(
        "--server",
        metavar="HOST:PORT",
        default=os.environ.get(SERVER_ENV) or None,
        help=f"tierank server address (default: ${SERVER_ENV}), waited for up to"
        f" ${CONNECT_TIMEOUT_ENV} seconds ({DEFAULT_CONNECT_TIMEOUT_SECONDS:g}); without either,"
        " an embedded server is started on 127.0.0.1 for this command",
    )
    parser.add_argument(
        "--db",
        type=Path,
        help="database of the embedded server (default: the server's default,"
        " $TIERANK_DB or $XDG_DATA_HOME/tierank/tierank.db)",
    )


@contextlib.contextmanager
def server_target(args: argparse.Namespace) -> Iterator[str]:
    """The --server address once it answers, or an embedded server's for the command."""
    if args.server:
        timeout = _connect_timeout()
        with Client(args.server) as client:
            client.wait_ready(timeout)
        yield args.server
        return
    with LocalServer(db=args.db) as server:
        yield server.address


def _connect_timeout() -> float:
    text = os.environ.get(CONNECT_TIMEOUT_ENV) or str(DEFAULT_CONNECT_TIMEOUT_SECONDS)
    try:
        timeout = float(text)
    except ValueError:
        timeout = -1.0
    if not timeout > 0:
        raise UsageError(
            f"${CONNECT_TIMEOUT_ENV} must be a positive number of seconds, not {text!r}"
        )
    return timeout


def positive_int(text: str) -> int:
    value = int(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be a positive integer, not {text}")
    return value


def judge_argument(text: str) -> rank_pb2.JudgeSpec:
    """argparse type for a judge string (`--judge`, `--anchor-judge`): see `parse_judge`."""
    try:
        return parse_judge(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def table_console() -> Console:
    """Standard output for tables: the terminal's width, or a wide fixed one in a pipe."""
    console = Console(highlight=False)
    return fit_console(console, on_terminal=console.is_terminal)
