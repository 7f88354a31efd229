"""`python -m tierank.server`: run the server until SIGTERM or SIGINT (or, with `--stdin-eof
stop`, the end of its standard input), then drain."""

from __future__ import annotations

import asyncio
import gc
import os
import signal
import sys

import anyio
import structlog

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

    async def on_end_of_stdin() -> None:
        await _end_of_file(sys.stdin.fileno() if sys.stdin is not None else -1)
        structlog.get_logger().info("standard input closed: shutting down")
        stop.set()

    async with anyio.create_task_group() as tasks:
        tasks.start_soon(on_signal)
        if settings.stops_at_stdin_eof:
            tasks.start_soon(on_end_of_stdin)
        await serve(settings, stop)
        tasks.cancel_scope.cancel()


async def _end_of_file(fd: int) -> None:
    """Return once `fd` reads as ended (what it holds before that is read and dropped). A pipe
    ends when every process holding its write end has closed it or died, however it died."""
    loop = asyncio.get_running_loop()
    readable = asyncio.Event()
    try:
        loop.add_reader(fd, readable.set)
    except (OSError, ValueError):
        # Not something to wait on (a regular file, /dev/null, or no descriptor at all):
        # reading never blocks there, so it is read to its end at once.
        while _read_some(fd):
            pass
        return
    try:
        while True:
            await readable.wait()
            readable.clear()
            if not _read_some(fd):
                return
    finally:
        loop.remove_reader(fd)


def _read_some(fd: int) -> bool:
    """Read what `fd` has ready; False at its end (or when it cannot be read at all)."""
    try:
        return bool(os.read(fd, 65536))
    except BlockingIOError:
        return True
    except OSError:
        return False


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
