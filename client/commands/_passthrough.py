"""Commands that run a server-side module with their arguments untouched (the client never
imports server code): that module's parser is the one definition of its flags, and `--help`
is its own help."""

from __future__ import annotations

import argparse
import os
import sys


def add_passthrough(
    subparsers: argparse._SubParsersAction[argparse.ArgumentParser],
    name: str,
    module: str,
    help_text: str,
) -> None:
    parser = subparsers.add_parser(
        name,
        help=help_text,
        description=f"Run `python -m {module}` with these arguments.",
        # Nothing is an option here, --help included: the module parses every argument.
        add_help=False,
        prefix_chars="\0",
    )
    parser.add_argument("module_args", nargs=argparse.REMAINDER, help="its own arguments")
    parser.set_defaults(handler=lambda args: run(module, list(args.module_args)))


def run(module: str, module_args: list[str]) -> int:
    # Older versions took the other flags after a `--`; these modules have no positional
    # arguments that could start with it, so that separator can only mean this and is dropped.
    if "--" in module_args:
        module_args.remove("--")
    # exec, so signals (SIGTERM from a supervisor, Ctrl-C) reach the module's process directly.
    os.execv(sys.executable, [sys.executable, "-m", module, *module_args])
