"""The `tierank` command line.

Each subcommand is a module in `tierank.client.commands` with an `add_parser(subparsers)`
function that registers its parser and sets `handler` (args -> exit code) as a default. Modules are
discovered, so adding a subcommand is adding a module. Exit codes are the `EXIT_*` constants
of `tierank.client.commands._shared`, listed for users in `tierank --help` (the epilog below).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import os
import pkgutil
import re
import signal
import sys
from collections.abc import Sequence

import grpc

from tierank import __version__
from tierank.client import commands
from tierank.client._errors import TierankError
from tierank.client._inputs import InputError
from tierank.client.commands._shared import (
    API_KEY_ENV,
    EXIT_BROKEN_PIPE,
    EXIT_INTERRUPTED,
    EXIT_NO_VERDICTS,
    EXIT_NOT_QUALIFIED,
    EXIT_OK,
    EXIT_PROVISIONAL,
    EXIT_SERVER_ERROR,
    EXIT_TIMED_OUT,
    EXIT_USAGE,
    CommandError,
    UsageError,
    error_text,
    settle_server,
)
from tierank.client.local_server import LocalServerError


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="tierank",
        description="Rank documents with an ensemble of LLM judges, as a tournament over gRPC.",
        epilog=f"Exit status: {EXIT_OK} success, {EXIT_SERVER_ERROR} server or connection error,"
        f" {EXIT_USAGE} usage error (the server's INVALID_ARGUMENT too); {EXIT_NO_VERDICTS}"
        " nothing measured (`rank`, `fill`, `study`: no judge answered; `eval`, `agree`: the"
        " inputs share no query or pair); `rank`, `fill` and `study` also"
        f" {EXIT_PROVISIONAL} (provisional result);"
        f" `qualify` {EXIT_NOT_QUALIFIED} (the judge is no better than chance); `rank` and"
        f" `watch` {EXIT_TIMED_OUT} (--timeout ran out, the job goes on); {EXIT_INTERRUPTED}"
        f" interrupted (Ctrl-C); {EXIT_BROKEN_PIPE} the output was closed early.",
    )
    parser.add_argument("--version", action="version", version=f"tierank {__version__}")
    subparsers = parser.add_subparsers(
        dest="command", metavar="COMMAND", required=True, help="see tierank COMMAND --help"
    )
    for module_info in sorted(pkgutil.iter_modules(commands.__path__), key=lambda m: m.name):
        if not module_info.name.startswith("_"):
            module = importlib.import_module(f"{commands.__name__}.{module_info.name}")
            module.add_parser(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    # A closed terminal (SIGHUP) or a kill (SIGTERM) ends the command as Ctrl-C does: it still
    # stops its embedded server (which is in a session of its own, so no terminal signal reaches
    # it) and says what becomes of its job.
    # Raised as SIGINT, so that each is handled where Ctrl-C is (asyncio.run cancels its task
    # rather than being interrupted anywhere).
    for signum in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, _as_ctrl_c)
    # Started with Ctrl-C ignored (a background job of a script): a kill or a hangup, raised as
    # SIGINT, would be ignored too and the command could not be stopped but by SIGKILL.
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        settle_server(args)
        exit_code: int = args.handler(args)
        # A reader that went away must be noticed here, not in the flush at exit.
        sys.stdout.flush()
        return exit_code
    except (UsageError, InputError) as error:
        print(f"tierank {args.command}: {error}", file=sys.stderr)
        return EXIT_USAGE
    except TierankError as error:
        print(f"tierank {args.command}: {_error_text(error, args)}", file=sys.stderr)
        # The server found the command line wrong (a bound, a name): a usage error too.
        if error.code == grpc.StatusCode.INVALID_ARGUMENT:
            return EXIT_USAGE
        return EXIT_SERVER_ERROR
    except CommandError as error:
        print(f"tierank {args.command}: {error}", file=sys.stderr)
        return error.exit_code
    except LocalServerError as error:
        if error.refused_arguments:
            print(f"tierank {args.command}: {error}", file=sys.stderr)
            return EXIT_USAGE
        print(f"tierank {args.command}: {error}; {_server_hint(error)}", file=sys.stderr)
        return EXIT_SERVER_ERROR
    except BrokenPipeError:
        _silence_output()
        return EXIT_BROKEN_PIPE
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED


def _as_ctrl_c(signum: int, frame: object) -> None:
    signal.raise_signal(signal.SIGINT)


def _error_text(error: TierankError, args: argparse.Namespace) -> str:
    """The error in one line, with a hint where a key was missing or not enough (unless the
    server's message already gives it)."""
    hint = _CREDENTIAL_HINTS.get(error.code)
    if hint is None:
        return error_text(error, args)
    return str(error) if API_KEY_ENV in error.message else f"{error} ({hint})"


_CREDENTIAL_HINTS = {
    grpc.StatusCode.UNAUTHENTICATED: f"pass --api-key or set ${API_KEY_ENV}",
    grpc.StatusCode.PERMISSION_DENIED: f"pass an admin key with --api-key or ${API_KEY_ENV}",
}


# How a server refused a database names the server that holds it (see the SQLite storage).
_HOLDER = re.compile(r"another tierank server \(serving (?P<address>\S+), pid \d+\)")


def _server_hint(error: LocalServerError) -> str:
    """The --server to pass: the one already serving the database, when the server named it."""
    holder = _HOLDER.search(str(error))
    if holder is None:
        return "pass --server to use a running server"
    return f"pass --server {holder['address']} to use that server while it runs"


def _silence_output() -> None:
    # The reader is gone: anything still buffered would fail again when Python flushes at exit
    # and print "Exception ignored ... BrokenPipeError". Point both streams at /dev/null.
    devnull = os.open(os.devnull, os.O_WRONLY)
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):
            os.dup2(devnull, stream.fileno())
    os.close(devnull)
