"""`tierank serve`: run the server in the foreground (the client never imports it).

Every argument goes to `python -m tierank.server` untouched, so the server's parser is the one
definition of its flags: `tierank serve --help` is the server's own help.
"""

from __future__ import annotations

import argparse

from tierank.client.commands._passthrough import add_passthrough
from tierank.client.local_server import SERVER_MODULE


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    add_passthrough(
        subparsers,
        "serve",
        SERVER_MODULE,
        "run a tierank server in the foreground (--help lists its flags)",
    )
