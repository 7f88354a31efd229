"""`tierank qualify` and `tierank fill`: start the request as an operation on the server, show
its progress on stderr until it ends, and hand back its result."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from types import TracebackType
from typing import TextIO

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from tierank.client._console import Console
from tierank.client._errors import TierankError
from tierank.client._operations import describe_operation, is_done, operation_result
from tierank.client.commands._eval_shared import LARGE_MESSAGE_OPTIONS
from tierank.client.commands._shared import same_server, server_connection
from tierank.client.sync import Client
from tierank.v1 import eval_pb2

# Plain progress (stderr not a terminal) prints a line each time this share more is done.
_PLAIN_STEP = 0.1


class _PlainLines:
    """A line when the operation starts, at each tenth of its calls, and when it ends."""

    def __init__(self, out: TextIO) -> None:
        self._out = out
        self._shown_step = -1

    def __enter__(self) -> _PlainLines:
        return self

    def __exit__(self, *exc_info: object) -> None:
        pass

    def show(self, operation: eval_pb2.Operation) -> None:
        progress = operation.progress
        share = progress.done_calls / progress.planned_calls if progress.planned_calls else 0.0
        step = int(share / _PLAIN_STEP)
        if step > self._shown_step or is_done(operation):
            self._shown_step = step
            print(describe_operation(operation), file=self._out, flush=True)


class _Bar:
    """A live bar of calls done out of planned, with what they spent."""

    def __init__(self, console: Console) -> None:
        self._bar = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("calls  {task.fields[spent]}"),
            TimeElapsedColumn(),
            console=console,
        )
        self._task = self._bar.add_task("", total=None, spent="")

    def __enter__(self) -> _Bar:
        self._bar.__enter__()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self._bar.__exit__(exc_type, exc, traceback)

    def show(self, operation: eval_pb2.Operation) -> None:
        progress = operation.progress
        spent = f"${progress.usage.cost_usd:.4f}, {progress.usage.input_tokens} input tokens"
        if progress.failed_calls:
            spent += f", {progress.failed_calls} failed"
        self._bar.update(
            self._task,
            description=operation.name,
            completed=progress.done_calls,
            total=progress.planned_calls or None,
            spent=spent,
        )


def run_operation(
    args: argparse.Namespace, command: str, start: Callable[[Client], eval_pb2.Operation]
) -> eval_pb2.Operation:
    """Start the operation (`start`), follow it with progress on stderr, and return it once
    it has succeeded; a failed or cancelled one raises TierankError. --timeout bounds the
    whole wait, and the operation is cancelled when it passes (as the unary call's deadline
    cancelled the work)."""
    live = sys.stderr.isatty()
    display = _Bar(Console(stderr=True)) if live else _PlainLines(sys.stderr)
    with (
        server_connection(args) as connection,
        connection.client(channel_options=LARGE_MESSAGE_OPTIONS) as client,
    ):
        operation = start(client)
        try:
            with display:
                for update in client.watch_operation(operation.name, timeout=args.timeout):
                    operation = update
                    display.show(operation)
        except KeyboardInterrupt:
            _say_how_to_follow(args, command, operation.name)
            raise
        except TierankError:
            if not is_done(operation):
                # Nobody waits for it any more: it must not go on spending.
                client.cancel_operation(operation.name, timeout=_CANCEL_TIMEOUT_S)
            raise
    operation_result(operation)  # raises unless it succeeded
    return operation


_CANCEL_TIMEOUT_S = 30.0


def _say_how_to_follow(args: argparse.Namespace, command: str, name: str) -> None:
    if not args.server:
        print(
            f"tierank {command}: interrupted; {name} stopped with the embedded server",
            file=sys.stderr,
        )
        return
    server = same_server(args)
    print(
        f"tierank {command}: interrupted; {name} goes on on the server. Follow it with "
        f"`tierank watch {name}{server}`, stop it with `tierank cancel {name}{server}`",
        file=sys.stderr,
    )
