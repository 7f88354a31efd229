"""`tierank serve`: run the server in the foreground (the client never imports it).

Every argument goes to `python -m tierank.server` untouched, so the server's parser is the one
definition of its flags: `tierank serve --help` is the server's own help.
"""

from __future__ import annotations

import argparse
import os
import sys

from tierank.client.local_server import SERVER_COMMAND


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "serve",
        help="run a tierank server in the foreground (--help lists its flags)",
        description="Run `python -m tierank.server` with these arguments.",
        # Nothing is an option here, --help included: the server parses every argument.
        add_help=False,
        prefix_chars="\0",
    )
    parser.add_argument(
        "server_args",
        nargs=argparse.REMAINDER,
        help="the server's flags, e.g. --listen HOST:PORT --db FILE --judges-config FILE",
    )
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    server_args = list(args.server_args)
    # Older versions took the server's other flags after a `--`; the server has no positional
    # arguments, so that separator can only mean this and is dropped.
    if "--" in server_args:
        server_args.remove("--")
    # exec, so signals (SIGTERM from a supervisor, Ctrl-C) reach the server directly.
    os.execv(sys.executable, [*SERVER_COMMAND, *server_args])
