"""The `tierank` command line.

Each subcommand is a module in `tierank.client.commands` with an `add_parser(subparsers)`
function that registers its parser and sets `handler` (args -> exit code) as a default. Modules are
discovered, so adding a subcommand is adding a module. Exit codes: 0 success, 1 a server or
connection error, 2 a usage error (argparse's own, or `UsageError`).
"""

from __future__ import annotations

import argparse
import importlib
import pkgutil
import sys
from collections.abc import Sequence

from tierank import __version__
from tierank.client import commands
from tierank.client._errors import TierankError
from tierank.client.commands._shared import EXIT_SERVER_ERROR, EXIT_USAGE, UsageError


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="tierank",
        description="Rank documents with an ensemble of LLM judges, as a tournament over gRPC.",
    )
    parser.add_argument("--version", action="version", version=f"tierank {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for module_info in sorted(pkgutil.iter_modules(commands.__path__), key=lambda m: m.name):
        if not module_info.name.startswith("_"):
            module = importlib.import_module(f"{commands.__name__}.{module_info.name}")
            module.add_parser(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.handler(args)
    except UsageError as error:
        print(f"tierank {args.command}: {error}", file=sys.stderr)
        return EXIT_USAGE
    except TierankError as error:
        print(f"tierank {args.command}: {error.describe()}", file=sys.stderr)
        return EXIT_SERVER_ERROR
    except KeyboardInterrupt:
        return 130
