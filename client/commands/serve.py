"""`tierank serve`: run the server in the foreground (the client never imports it)."""

from __future__ import annotations

import argparse
import os
import sys


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "serve",
        help="run a tierank server in the foreground",
        description="Run `python -m tierank.server` with these flags; anything after `--` is"
        " passed to the server verbatim.",
    )
    parser.add_argument(
        "--listen", metavar="HOST:PORT", help="address to bind (server default: $TIERANK_LISTEN)"
    )
    parser.add_argument(
        "--db",
        metavar="PATH",
        help="SQLite database (server default: $TIERANK_DB or ~/.local/share/tierank/tierank.db)",
    )
    parser.add_argument(
        "--ready-file", metavar="PATH", help="file the server writes its bound HOST:PORT to"
    )
    parser.add_argument(
        "server_args", nargs=argparse.REMAINDER, help="further server flags, after `--`"
    )
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    command = [sys.executable, "-m", "tierank.server"]
    for flag, value in (
        ("--listen", args.listen),
        ("--db", args.db),
        ("--ready-file", args.ready_file),
    ):
        if value is not None:
            command += [flag, value]
    passthrough = args.server_args
    command += passthrough[1:] if passthrough[:1] == ["--"] else passthrough
    # exec, so signals (SIGTERM from a supervisor, Ctrl-C) reach the server directly.
    os.execv(sys.executable, command)
