"""What several subcommands need: the --server option, exit codes, usage errors, a console."""

from __future__ import annotations

import argparse
import contextlib
import os
from collections.abc import Iterator

from rich.console import Console

from tierank.client.local_server import LocalServer

EXIT_OK = 0
EXIT_SERVER_ERROR = 1
EXIT_USAGE = 2

SERVER_ENV = "TIERANK_SERVER"

# Off a terminal rich would squeeze tables into 80 columns; names must stay whole in a pipe.
_PIPE_WIDTH = 200


class UsageError(Exception):
    """The command line is wrong in a way argparse cannot see (exit code 2)."""


def add_server_option(parser: argparse.ArgumentParser, *, required: bool = True) -> None:
    help_text = f"tierank server address HOST:PORT (default: ${SERVER_ENV})"
    if not required:
        help_text += "; without either, an embedded server is started for this command"
    parser.add_argument(
        "--server", metavar="HOST:PORT", default=os.environ.get(SERVER_ENV) or None, help=help_text
    )


def server_address(args: argparse.Namespace) -> str:
    if not args.server:
        raise UsageError(f"no server given: pass --server HOST:PORT or set ${SERVER_ENV}")
    return args.server


@contextlib.contextmanager
def server_target(args: argparse.Namespace) -> Iterator[str]:
    """The --server address, or an embedded server's for the command's duration."""
    if args.server:
        yield args.server
        return
    with LocalServer(db=args.db) as server:
        yield server.address


def positive_int(text: str) -> int:
    value = int(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be a positive integer, not {text}")
    return value


def table_console() -> Console:
    """Standard output for tables: the terminal's width, or a wide fixed one in a pipe."""
    console = Console(highlight=False)
    if not console.is_terminal:
        console.width = _PIPE_WIDTH
    return console
