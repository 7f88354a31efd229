"""What several subcommands need: the --server option, exit codes, usage errors."""

from __future__ import annotations

import argparse
import os

EXIT_OK = 0
EXIT_SERVER_ERROR = 1
EXIT_USAGE = 2

SERVER_ENV = "TIERANK_SERVER"


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


def positive_int(text: str) -> int:
    value = int(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be a positive integer, not {text}")
    return value
