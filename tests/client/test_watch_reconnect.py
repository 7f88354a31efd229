"""A watch whose connection breaks resumes from the last sequence it delivered: no gaps, no
duplicates. The break is real: a loopback TCP proxy resets the connection mid-stream."""

from __future__ import annotations

from collections.abc import Callable

import grpc
import pytest

from tierank.client import AsyncClient, Client, JobSpec, ReconnectPolicy, TierankError

FAST_RECONNECT = ReconnectPolicy(max_attempts=5, initial_backoff=0.01, max_backoff=0.05)


@pytest.fixture
def finished_job(tierank_server: str, example_spec: JobSpec) -> tuple[str, list]:
    """A finished job and its complete event list, as a direct (unbroken) watch sees it."""
    with Client(tierank_server) as client:
        events = list(client.rank(example_spec))
    return events[0].job, events


def stream_bytes(tierank_server: str, cutting_proxy: Callable, job: str) -> int:
    """Bytes the server sends for a whole watch of `job` on a fresh connection."""
    proxy = cutting_proxy(tierank_server)
    with Client(proxy.address) as client:
        list(client.watch_job(job))
    return proxy.server_bytes[0]


class ReconnectLog:
    def __init__(self) -> None:
        self.attempts: list[tuple[int, grpc.StatusCode]] = []

    def __call__(self, attempt: int, error: TierankError) -> None:
        self.attempts.append((attempt, error.code))


def test_sync_watch_resumes_after_a_reset(
    tierank_server: str, cutting_proxy: Callable, finished_job: tuple[str, list]
) -> None:
    job, expected = finished_job
    total = stream_bytes(tierank_server, cutting_proxy, job)
    proxy = cutting_proxy(tierank_server, cut_after=total // 2)
    log = ReconnectLog()

    with Client(proxy.address, reconnect=FAST_RECONNECT, on_reconnect=log) as client:
        events = list(client.watch_job(job, timeout=30))

    assert proxy.cuts_done == 1
    assert log.attempts == [(1, grpc.StatusCode.UNAVAILABLE)]
    assert events == expected


async def test_async_watch_resumes_after_repeated_resets(
    tierank_server: str, cutting_proxy: Callable, finished_job: tuple[str, list]
) -> None:
    job, expected = finished_job
    total = stream_bytes(tierank_server, cutting_proxy, job)
    proxy = cutting_proxy(tierank_server, cut_after=total // 3, cuts=2)
    log = ReconnectLog()

    async with AsyncClient(proxy.address, reconnect=FAST_RECONNECT, on_reconnect=log) as client:
        events = [event async for event in client.watch_job(job, after_sequence=1, timeout=30)]

    assert proxy.cuts_done == 2
    assert [code for _, code in log.attempts] == [grpc.StatusCode.UNAVAILABLE] * 2
    assert events == expected[1:]


async def test_watch_gives_up_after_its_attempts(
    tierank_server: str, cutting_proxy: Callable, finished_job: tuple[str, list]
) -> None:
    job, _ = finished_job
    # Cut after one byte: no connection ever completes its HTTP/2 handshake.
    proxy = cutting_proxy(tierank_server, cut_after=1, cuts=100)
    policy = ReconnectPolicy(max_attempts=2, initial_backoff=0.01, max_backoff=0.01)
    log = ReconnectLog()

    async with AsyncClient(proxy.address, reconnect=policy, on_reconnect=log) as client:
        with pytest.raises(TierankError) as raised:
            [event async for event in client.watch_job(job, timeout=30)]

    assert raised.value.code == grpc.StatusCode.UNAVAILABLE
    # A server never reached is named once, and no connection that never existed is "lost".
    assert raised.value.message.startswith(f"cannot reach {proxy.address}")
    assert log.attempts == []
