"""Fixtures: real tierank servers (child processes on loopback, tmp databases) and a TCP proxy
that can cut connections, so clients are tested over real gRPC only."""

from __future__ import annotations

import contextlib
import json
import socket
import struct
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tierank.client import JobSpec, LocalServer, job_spec

# Tests run with --import-mode=importlib, so the helper module is put on the path explicitly.
sys.path.insert(0, str(Path(__file__).parent))

from cli_process import POOL, QUERY


@pytest.fixture(scope="session")
def tierank_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Address of one server shared by the session; tests must not assume it holds no jobs."""
    with LocalServer(db=tmp_path_factory.mktemp("shared-server") / "tierank.db") as server:
        yield server.address


@pytest.fixture
def start_server(tmp_path: Path) -> Iterator[Callable[..., LocalServer]]:
    """Factory for servers owned by one test (own database unless `db` is given)."""
    servers: list[LocalServer] = []

    def start(db: Path | None = None) -> LocalServer:
        server = LocalServer(db=db or tmp_path / f"tierank-{len(servers)}.db")
        servers.append(server)
        server.start()
        return server

    yield start
    for server in servers:
        server.stop()


@pytest.fixture(scope="session")
def example_pool() -> list[dict]:
    return [json.loads(line) for line in Path(POOL).read_text().splitlines() if line.strip()]


@pytest.fixture
def example_spec(example_pool: list[dict]) -> JobSpec:
    """The example pool with the offline lexical judge: settles in well under a second. (A full
    order can end EXHAUSTED: BM25 ties the passages that share no query term.)"""
    return job_spec(QUERY, example_pool, judges=["lexical"], top_k=10, seed=7)


@pytest.fixture
def slow_spec() -> JobSpec:
    """A job still running when a test acts on it: a full order of 400 candidates, two per call,
    one call at a time. Tests cancel it; none waits for it."""
    pool = [{"id": f"p{i}", "text": f"passage {i} about topic {i % 7}"} for i in range(400)]
    return job_spec("topic 3", pool, judges=["lexical"], batch_size=2, max_in_flight=1)


class CuttingProxy:
    """A loopback TCP proxy that breaks connections to simulate a network failure.

    The first `cuts` connections are reset once they have carried `cut_after` bytes from the
    server; later connections pass through untouched.
    """

    def __init__(self, upstream: str, *, cut_after: int | None = None, cuts: int = 1) -> None:
        host, port = upstream.rsplit(":", 1)
        self._upstream = (host, int(port))
        self._cut_after = cut_after
        self._cuts_left = cuts if cut_after is not None else 0
        self.cuts_done = 0
        self.server_bytes: list[int] = []
        self._lock = threading.Lock()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.address = f"127.0.0.1:{self._listener.getsockname()[1]}"
        self._threads: list[threading.Thread] = []
        self._sockets: list[socket.socket] = []
        self._spawn(self._accept_loop)

    def close(self) -> None:
        _reset(self._listener)
        with self._lock:
            for sock in self._sockets:
                _reset(sock)
        for thread in self._threads:
            thread.join(timeout=5)

    def _spawn(self, target: Callable[..., None], *args: object) -> None:
        thread = threading.Thread(target=target, args=args, daemon=True)
        self._threads.append(thread)
        thread.start()

    def _accept_loop(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(self._upstream)
            with self._lock:
                self._sockets += [client, upstream]
                cut = self._cuts_left > 0
                self._cuts_left -= cut
                index = len(self.server_bytes)
                self.server_bytes.append(0)
            self._spawn(self._pump, client, upstream, None, None)
            self._spawn(self._pump, upstream, client, index, self._cut_after if cut else None)

    def _pump(
        self, source: socket.socket, sink: socket.socket, index: int | None, cut_after: int | None
    ) -> None:
        while True:
            try:
                data = source.recv(65536)
                if not data:
                    break
                if cut_after is not None and self.server_bytes[index] + len(data) >= cut_after:
                    sink.sendall(data[: cut_after - self.server_bytes[index]])
                    self.cuts_done += 1
                    break
                sink.sendall(data)
                if index is not None:
                    self.server_bytes[index] += len(data)
            except OSError:
                break
        _reset(source)
        _reset(sink)


def _reset(sock: socket.socket) -> None:
    # shutdown() takes effect at once, even while the other pump thread is blocked in recv() on
    # this socket (close() alone would wait for it); SO_LINGER 0 makes the close send RST.
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        sock.shutdown(socket.SHUT_RDWR)
    sock.close()


@pytest.fixture
def cutting_proxy() -> Iterator[Callable[..., CuttingProxy]]:
    proxies: list[CuttingProxy] = []

    def make(upstream: str, **kwargs: object) -> CuttingProxy:
        proxy = CuttingProxy(upstream, **kwargs)
        proxies.append(proxy)
        return proxy

    yield make
    for proxy in proxies:
        proxy.close()
