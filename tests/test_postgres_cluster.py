"""The throwaway PostgreSQL cluster helper: a real initdb/pg_ctl cluster, started and removed."""

from __future__ import annotations

import os
import shutil
import socket
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import psycopg
import pytest

# The cluster helper is shared test support, in this folder.
sys.path.insert(0, str(Path(__file__).parent))

import postgres_cluster
from postgres_cluster import find_bin_dir, throwaway_cluster


@pytest.fixture
def bin_dir() -> Path:
    """PostgreSQL's programs; CI sets TIERANK_REQUIRE_POSTGRES=1 so that it fails, not skips."""
    try:
        return find_bin_dir()
    except RuntimeError as exc:
        if os.environ.get("TIERANK_REQUIRE_POSTGRES") == "1":
            raise
        pytest.skip(str(exc))


@pytest.fixture
def base_dir(bin_dir: Path) -> Iterator[Path]:
    # Not tmp_path: under root the cluster runs as `nobody`, who cannot enter /tmp/pytest-of-root.
    path = Path(tempfile.mkdtemp(prefix="tierank-pg-"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def _port_is_free(port: int) -> bool:
    """Whether nothing listens on `port`. SO_REUSEADDR, as servers bind: a connection of the
    stopped server's may linger in TIME_WAIT (when its side closed first), which is no
    listener and no reason a new server could not bind."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def test_cluster_serves_sql_and_is_removed_on_exit(base_dir: Path) -> None:
    with throwaway_cluster(base_dir) as url:
        parts = urlsplit(url)
        assert (parts.scheme, parts.username, parts.hostname, parts.path) == (
            "postgresql",
            "postgres",
            "127.0.0.1",
            "/test",
        )
        assert parts.port is not None and parts.port != 5432
        assert (base_dir / "data" / "PG_VERSION").is_file()
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("CREATE TABLE verdicts (id int PRIMARY KEY, label text NOT NULL)")
            conn.execute("INSERT INTO verdicts VALUES (1, 'héllo'), (2, 'b')")
            rows = conn.execute("SELECT id, label FROM verdicts ORDER BY id").fetchall()
            encoding = conn.execute("SHOW server_encoding").fetchone()
        assert rows == [(1, "héllo"), (2, "b")]
        assert encoding == ("UTF8",)
        assert not _port_is_free(parts.port)

    assert _port_is_free(parts.port)
    assert not (base_dir / "data").exists()
    assert not (base_dir / "sockets").exists()
    with pytest.raises(psycopg.OperationalError):
        psycopg.connect(url, connect_timeout=2)


def test_a_server_that_cannot_start_gives_its_log_and_leaves_nothing(
    base_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        monkeypatch.setattr(postgres_cluster, "free_port", lambda: taken.getsockname()[1])
        with (
            pytest.raises(RuntimeError, match=r"(?s)did not start.*server log.*could not bind"),
            throwaway_cluster(base_dir),
        ):
            pytest.fail("the server started on a port already taken")
    assert not (base_dir / "data").exists()
    assert not (base_dir / "sockets").exists()


@pytest.mark.skipif(os.geteuid() != 0, reason="only root runs the cluster as another user")
def test_root_gets_a_clear_error_for_a_directory_nobody_cannot_reach(base_dir: Path) -> None:
    # In /tmp, not tmp_path: under pytest-xdist tmp_path is long enough that the socket path
    # check would refuse it first.
    private = base_dir / "private"
    private.mkdir(mode=0o700)
    (private / "cluster").mkdir()
    with (
        pytest.raises(RuntimeError, match="cannot reach"),
        throwaway_cluster(private / "cluster"),
    ):
        pass
    assert not (private / "cluster" / "data").exists()


def test_missing_binaries_say_which_package_to_install(tmp_path: Path) -> None:
    with pytest.raises(RuntimeError, match=r"install Debian's `postgresql` package"):
        find_bin_dir(path="", debian_root=tmp_path / "no-postgresql")


def test_debian_layout_gives_the_newest_version(tmp_path: Path) -> None:
    for version in ("9", "13", "16"):
        bin_path = tmp_path / version / "bin"
        bin_path.mkdir(parents=True)
        for program in ("initdb", "pg_ctl"):
            (bin_path / program).touch()
    assert find_bin_dir(path="", debian_root=tmp_path) == tmp_path / "16" / "bin"
