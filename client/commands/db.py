"""`tierank db status|migrate --db URL`: a PostgreSQL database's schema migrations, run by
`python -m tierank.server.db_tool` (the client never imports server code)."""

from __future__ import annotations

import argparse

from tierank.client.commands._passthrough import add_passthrough


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    add_passthrough(
        subparsers,
        "db",
        "tierank.server.db_tool",
        "list or apply a PostgreSQL database's schema migrations (--help lists the flags)",
    )
