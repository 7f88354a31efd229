"""Fixtures shared by every test folder: a real server on loopback, job specs, PostgreSQL
(TIERANK_TEST_POSTGRES_URL, else a throwaway cluster; skipped where neither can be had, failed
instead under TIERANK_REQUIRE_POSTGRES=1, as in CI) and the shared data (tests/shared_data.py:
skipped where it is missing, failed in CI)."""

from __future__ import annotations

import os
import signal
import sys
import uuid
from collections.abc import AsyncIterator, Callable, Generator, Iterator
from pathlib import Path

import grpc
import pytest

sys.path.insert(0, str(Path(__file__).parent))

from postgres_cluster import (
    NoPostgres,
    drop_schema,
    fresh_schema,
    postgres_for_tests,
    schema_url_for,
)
from shared_data import require_shared_data

from tierank.client import LocalServer
from tierank.server.app import background_server
from tierank.server.settings import ServerSettings
from tierank.v1 import rank_pb2, rank_pb2_grpc

# More workers than this only add start-ups, and load that timing-sensitive tests feel.
MAX_WORKERS = 4


@pytest.hookimpl(wrapper=True, optionalhook=True)
def pytest_xdist_auto_num_workers(config: pytest.Config) -> Generator[None, int, int]:
    """`-n auto` (pyproject's default): two workers a core (xdist's count is one a core),
    capped. A worker spends about half its time waiting (on the servers and commands it starts,
    on leases, timers and fake providers' delays): with one per core, a third of two cores'
    time went unused (vmstat, whole suite); a third worker took a sixth off the run, and a
    fourth took it from 6 min 9 s to 4 min 58 s on two cores (2026-11-28, back to back)."""
    return min(2 * (yield), MAX_WORKERS)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The modules marked `long_module` first: xdist hands whole modules to workers in this
    order, and a long one started last kept one worker busy after the others were done (the
    longest take 30-100 s, a whole run about 300 s)."""
    items.sort(key=lambda item: item.get_closest_marker("long_module") is None)


def pytest_configure(config: pytest.Config) -> None:
    """Bytecode for the Python processes the suite starts, where $PYTHONDONTWRITEBYTECODE is set.

    A run starts hundreds of them (servers, `tierank` commands, admin tools), each importing
    some hundreds of tierank's modules; with no bytecode written, each compiled them all afresh,
    about a quarter of its start-up. They write it to pytest's cache folder instead (never
    beside the sources), set here before xdist starts its workers, which inherit it.
    """
    cache = getattr(config, "cache", None)  # absent under `-p no:cacheprovider`
    if cache is None or "PYTHONPYCACHEPREFIX" in os.environ:
        return
    if os.environ.pop("PYTHONDONTWRITEBYTECODE", None):
        os.environ["PYTHONPYCACHEPREFIX"] = str(cache.mkdir("bytecode"))


@pytest.fixture(autouse=True)
def isolated_environment(
    monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """What each test, and every `tierank` it starts, inherits.

    A `tierank` run without --db or --server uses $TIERANK_DB, else the default database
    $XDG_DATA_HOME/tierank/tierank.db: each test gets a data directory no other test, worker or
    person uses (created only when something writes there).

    Tables off a terminal are as wide as $COLUMNS, so tests see the width a pipe gets unless
    they set one. Not only a shell sets it: GNU readline, imported in pytest's process, puts the
    terminal's size (80x24 for a plain xterm) in the C environment, unseen by os.environ but
    inherited by children started without `env`, pytest-xdist's workers among them.
    """
    for name in ("TIERANK_DB", "COLUMNS", "LINES"):
        monkeypatch.delenv(name, raising=False)
        os.unsetenv(name)  # the C environment's copy, if only it has one
    home = tmp_path_factory.getbasetemp() / "data-homes" / uuid.uuid4().hex[:12]
    monkeypatch.setenv("XDG_DATA_HOME", str(home))


@pytest.fixture
async def server_address(tmp_path: Path) -> AsyncIterator[str]:
    """An in-process server on 127.0.0.1 with its own SQLite file."""
    settings = ServerSettings(
        listen="127.0.0.1:0", db=tmp_path / "tierank.db", shutdown_grace_s=2.0, max_message_mb=4
    )
    async with background_server(settings) as address:
        yield address


@pytest.fixture
async def stub(server_address: str) -> AsyncIterator[rank_pb2_grpc.RankServiceStub]:
    async with grpc.aio.insecure_channel(server_address) as channel:
        yield rank_pb2_grpc.RankServiceStub(channel)


class ServerProcess:
    """A server in its own process, restartable on one database, for crash and signal tests."""

    def __init__(self, db: Path, extra_env: dict[str, str] | None = None) -> None:
        self.db = db
        self.extra_env = extra_env or {}
        self._server: LocalServer | None = None

    def start(self) -> str:
        self._server = LocalServer(
            db=self.db, extra_args=("--log-level", "warning"), env=self.extra_env
        )
        return self._server.start()

    def signal(self, signum: int) -> None:
        assert self._server is not None and self._server.pid is not None
        os.kill(self._server.pid, signum)

    def kill9(self) -> None:
        self.signal(signal.SIGKILL)
        self.terminate()

    def terminate(self) -> int | None:
        """SIGTERM, and the exit code once it has drained (that of the kill, if killed)."""
        return None if self._server is None else self._server.stop(timeout=30)


@pytest.fixture
def server_process(tmp_path: Path) -> Iterator[ServerProcess]:
    proc = ServerProcess(tmp_path / "tierank.db")
    yield proc
    proc.terminate()


SpecFactory = Callable[..., rank_pb2.JobSpec]


QUERY_TERMS = ("photovoltaic", "panels", "solar", "work", "how", "do")


def passage_text(i: int) -> str:
    """Equal-length texts; candidate i holds the first 6 - i query terms, so under BM25 a
    lower index always ranks higher among the first six, and the rest tie with no match."""
    terms = list(QUERY_TERMS[: max(0, len(QUERY_TERMS) - i)])
    filler = [f"filler{i}x{j}" for j in range(12 - len(terms))]
    return f"passage {i}: " + " ".join(terms + filler)


@pytest.fixture
def make_spec() -> SpecFactory:
    """A job over n candidates; c000 is best for both judges: hidden `score` is n - i."""

    def build(
        n: int = 30,
        judges: list[rank_pb2.JudgeSpec] | None = None,
        **fields: object,
    ) -> rank_pb2.JobSpec:
        candidates = [
            rank_pb2.Candidate(id=f"c{i:03d}", text=passage_text(i), metadata={"score": str(n - i)})
            for i in range(n)
        ]
        return rank_pb2.JobSpec(
            query="how do photovoltaic solar panels work",
            rubric="relevant if it explains the mechanism",
            candidates=candidates,
            judges=judges or [rank_pb2.JudgeSpec(provider="lexical")],
            **fields,
        )

    return build


def oracle(noise: float = 0.0, **options: str) -> rank_pb2.JudgeSpec:
    return rank_pb2.JudgeSpec(
        provider="oracle",
        model=options.pop("model", "hidden-score"),
        parameters=rank_pb2.JudgeParameters(options={"noise": str(noise), **options}),
    )


@pytest.fixture
def oracle_judge() -> Callable[..., rank_pb2.JudgeSpec]:
    return oracle


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """../shared/data (tests/shared_data.py): skipped where it is missing, failed in CI."""
    return require_shared_data()


@pytest.fixture(scope="session")
def postgres_url() -> Iterator[str]:
    try:
        with postgres_for_tests() as url:
            yield url
    except NoPostgres as error:
        if os.environ.get("TIERANK_REQUIRE_POSTGRES") == "1":
            pytest.fail(f"PostgreSQL is required (TIERANK_REQUIRE_POSTGRES=1): {error}")
        pytest.skip(f"no PostgreSQL: {error}")


@pytest.fixture
def pg_schema(postgres_url: str) -> Iterator[str]:
    """A schema name no other test uses (not created yet); dropped after the test."""
    schema = fresh_schema()
    yield schema
    drop_schema(postgres_url, schema)


@pytest.fixture
def schema_url(postgres_url: str, pg_schema: str) -> str:
    """The test database with a schema of this test's own first on the search path."""
    return schema_url_for(postgres_url, pg_schema)
