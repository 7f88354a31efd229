"""The `tierank` command line.

Each subcommand is a module in `tierank.client.commands` with an `add_parser(subparsers)`
function that registers its parser and sets `handler` (args -> exit code) as a default. Modules are
discovered, so adding a subcommand is adding a module. Exit codes: 0 success, 1 a server or
connection error, 2 a usage error (argparse's own, or `UsageError`), 3 and 4 a `rank` result
that is not what was asked for (see `tierank rank --help`), 141 a reader that went away.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import os
import pkgutil
import sys
from collections.abc import Sequence

from tierank import __version__
from tierank.client import commands
from tierank.client._errors import TierankError
from tierank.client.commands._shared import (
    EXIT_BROKEN_PIPE,
    EXIT_SERVER_ERROR,
    EXIT_USAGE,
    UsageError,
)
from tierank.client.local_server import LocalServerError


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="tierank",
        description="Rank documents with an ensemble of LLM judges, as a tournament over gRPC.",
        epilog="Exit status: 0 success, 1 server or connection error, 2 usage error; `tierank"
        " rank` also 3 (no judge answered) and 4 (provisional result); 141 the output was"
        " closed early.",
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
        exit_code = args.handler(args)
        # A reader that went away must be noticed here, not in the flush at exit.
        sys.stdout.flush()
        return exit_code
    except UsageError as error:
        print(f"tierank {args.command}: {error}", file=sys.stderr)
        return EXIT_USAGE
    except TierankError as error:
        print(f"tierank {args.command}: {error.describe()}", file=sys.stderr)
        return EXIT_SERVER_ERROR
    except LocalServerError as error:
        print(
            f"tierank {args.command}: {error}; pass --server to use a running server",
            file=sys.stderr,
        )
        return EXIT_SERVER_ERROR
    except BrokenPipeError:
        _silence_output()
        return EXIT_BROKEN_PIPE
    except KeyboardInterrupt:
        return 130


def _silence_output() -> None:
    # The reader is gone: anything still buffered would fail again when Python flushes at exit
    # and print "Exception ignored ... BrokenPipeError". Point both streams at /dev/null.
    devnull = os.open(os.devnull, os.O_WRONLY)
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):
            os.dup2(devnull, stream.fileno())
    os.close(devnull)
