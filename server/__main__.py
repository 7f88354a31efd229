"""`python -m tierank.server`: run the server until SIGTERM or SIGINT, then drain."""

from __future__ import annotations

import gc
import signal
import sys

import anyio

from tierank.server.app import ListenError, UnsafeSettings, serve
from tierank.server.errors import StorageError
from tierank.server.judges.settings import JudgeSettingsError
from tierank.server.logs import configure
from tierank.server.rpc.tls import TlsSettingsError
from tierank.server.settings import ServerSettings, from_args
from tierank.server.storage.sqlite import DatabaseLocked
from tierank.server.tenancy.sealing import SealingError


async def _main(settings: ServerSettings) -> None:
    stop = anyio.Event()

    async def on_signal() -> None:
        with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
            # Keep listening until the drain is over: a repeated SIGTERM (from an impatient
            # supervisor) must not fall through to the default handler and kill the drain.
            async for _ in signals:
                stop.set()

    async with anyio.create_task_group() as tasks:
        tasks.start_soon(on_signal)
        await serve(settings, stop)
        tasks.cancel_scope.cancel()


def _first_leaf(error: BaseException) -> BaseException:
    """The first exception that is not a group (task groups nest the one that stopped us)."""
    while isinstance(error, BaseExceptionGroup):
        error = error.exceptions[0]
    return error


# The cyclic garbage collector's thresholds in a server process. A server allocates many
# short-lived objects per verdict (messages, tasks, futures) that reference counting frees, and
# with Python's default (a young collection every 700 allocations) the collector spent about a
# quarter of the server's CPU finding nothing; bench/README.md, section 2, has the figures.
GC_THRESHOLDS = (50_000, 10, 10)


def main(argv: list[str] | None = None) -> int:
    settings = from_args(argv)
    configure(settings.log_level, settings.log_format)
    # What the imports made lives as long as the process: full collections need not visit it.
    gc.collect()
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLDS)
    exit_code = 0
    try:
        anyio.run(_main, settings)
    except* (
        DatabaseLocked,
        JudgeSettingsError,
        ListenError,
        StorageError,
        UnsafeSettings,
        TlsSettingsError,
        SealingError,
    ) as group:
        # Reasons in plain words (address taken, database locked or damaged, unsafe or broken
        # settings): one line, no traceback.
        print(f"tierank: {_first_leaf(group)}", file=sys.stderr)
        exit_code = 1
    return exit_code


if __name__ == "__main__":
    sys.exit(main())
