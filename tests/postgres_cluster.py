"""A throwaway PostgreSQL cluster for tests, for machines where no server is reachable.

It uses the `initdb`/`pg_ctl` of Debian's `postgresql` package. initdb refuses to run as root,
so under root every PostgreSQL program runs as `nobody`; the base directory is then handed to
that user, and it must be reachable by it (a fresh `tempfile.mkdtemp()` in /tmp is; pytest's
`tmp_path` under /tmp/pytest-of-root is not).
"""

from __future__ import annotations

import os
import pwd
import shlex
import shutil
import socket
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import quote

SUPERUSER = "postgres"
DATABASE = "test"
UNPRIVILEGED_USER = "nobody"
DEBIAN_ROOT = Path("/usr/lib/postgresql")
START_TIMEOUT_S = 30
# A Unix socket path is limited to 107 bytes; PostgreSQL adds "/.s.PGSQL.<port>.lock".
_MAX_SOCKET_DIR_LEN = 107 - len("/.s.PGSQL.65535.lock")
_LOG_TAIL_CHARS = 4000
_RESTART_ATTEMPTS = 3


def find_bin_dir(path: str | None = None, debian_root: Path = DEBIAN_ROOT) -> Path:
    """The directory holding initdb and pg_ctl: from `path` (default $PATH), else Debian's."""
    initdb = shutil.which("initdb", path=path)
    if initdb is not None:
        # /usr/local/bin may hold symlinks; pg_ctl finds `postgres` beside its real file.
        bin_dir = Path(initdb).resolve().parent
        if (bin_dir / "pg_ctl").is_file():
            return bin_dir
    versions = sorted(
        (d for d in debian_root.glob("*/bin") if (d / "initdb").is_file()),
        key=lambda d: int(d.parent.name) if d.parent.name.isdigit() else -1,
    )
    if versions:
        return versions[-1]
    raise RuntimeError(
        "PostgreSQL's initdb/pg_ctl were not found on PATH or under "
        f"{debian_root}/*/bin; install Debian's `postgresql` package "
        "(apt-get install postgresql) or point TIERANK_TEST_POSTGRES_URL at a running server"
    )


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class _Runner:
    """Runs PostgreSQL programs, as `nobody` when this process is root."""

    def __init__(self, bin_dir: Path, cwd: Path) -> None:
        self.bin_dir = bin_dir
        self.cwd = cwd
        self.account = pwd.getpwnam(UNPRIVILEGED_USER) if os.geteuid() == 0 else None

    def hand_over(self, directory: Path) -> None:
        if self.account is not None:
            os.chown(directory, self.account.pw_uid, self.account.pw_gid)

    def run(self, program: str, *args: str, timeout: float) -> subprocess.CompletedProcess[str]:
        command = [str(self.bin_dir / program), *args]
        if self.account is not None:
            # setpriv (util-linux) drops to the account, not subprocess's user=/group=: those
            # make Python fork() rather than vfork(), which runs gRPC's fork handlers in the
            # child, and with gRPC threads busy in this process (a test stopping the cluster
            # under a server's streams) they abort it before pg_ctl starts.
            uid, gid = self.account.pw_uid, self.account.pw_gid
            command = ["setpriv", f"--reuid={uid}", f"--regid={gid}", "--clear-groups", *command]
        return subprocess.run(
            command,
            cwd=self.cwd,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )


def _log_tail(log: Path) -> str:
    try:
        return log.read_text(errors="replace")[-_LOG_TAIL_CHARS:]
    except OSError as exc:
        return f"(no server log: {exc})"


@contextmanager
def throwaway_cluster(base_dir: Path) -> Iterator[str]:
    """Start a cluster under `base_dir`, yield its URL for database `test`, then stop it.

    The URL is `postgresql://postgres@127.0.0.1:<port>/test` (trust authentication). On exit
    the server is stopped (`pg_ctl stop -m fast`) and its data, socket and log are removed.
    """
    base_dir = base_dir.resolve()
    runner = _Runner(find_bin_dir(), cwd=base_dir)
    data, sockets, log = base_dir / "data", base_dir / "sockets", base_dir / "server.log"
    if len(str(sockets)) > _MAX_SOCKET_DIR_LEN:
        raise ValueError(f"base_dir {base_dir} is too long for a Unix socket path")
    if runner.account is not None and _unreachable_by(base_dir, runner.account):
        raise RuntimeError(
            f"{UNPRIVILEGED_USER} cannot reach {base_dir}: use a directory whose parents "
            "it may traverse, e.g. tempfile.mkdtemp() in /tmp"
        )
    sockets.mkdir()
    for owned in (base_dir, sockets):
        runner.hand_over(owned)
    try:
        initdb = runner.run(
            "initdb",
            f"--pgdata={data}",
            f"--username={SUPERUSER}",
            "--auth=trust",
            "--encoding=UTF8",
            "--locale=C",
            # A throwaway cluster never needs to survive a power cut; syncing costs seconds.
            "--no-sync",
            timeout=120,
        )
        if initdb.returncode != 0:
            raise RuntimeError(f"initdb failed:\n{initdb.stdout}{initdb.stderr}")
        port = _start(runner, data, sockets, log)
        created = runner.run(
            "createdb", "-h", "127.0.0.1", "-p", str(port), "-U", SUPERUSER, DATABASE, timeout=30
        )
        if created.returncode != 0:
            raise RuntimeError(f"createdb failed: {created.stderr}\n{_log_tail(log)}")
        yield f"postgresql://{SUPERUSER}@127.0.0.1:{port}/{DATABASE}"
    finally:
        if (data / "postmaster.pid").exists():
            runner.run("pg_ctl", "stop", "-D", str(data), "-m", "fast", "-w", timeout=60)
        shutil.rmtree(data, ignore_errors=True)
        shutil.rmtree(sockets, ignore_errors=True)
        log.unlink(missing_ok=True)


def _unreachable_by(directory: Path, account: pwd.struct_passwd) -> bool:
    """Whether some parent of `directory` denies `account` the search permission."""
    for parent in directory.parents:
        st = parent.stat()
        if st.st_uid == account.pw_uid:
            bit = 0o100
        elif st.st_gid == account.pw_gid:
            bit = 0o010
        else:
            bit = 0o001
        if not st.st_mode & bit:
            return True
    return False


def _pg_ctl_start(
    runner: _Runner, data: Path, log: Path, port: int, sockets: Path
) -> subprocess.CompletedProcess[str]:
    # fsync off: nothing in a throwaway cluster must survive a crash, and it is faster.
    options = f"-c listen_addresses=127.0.0.1 -p {port} -k {shlex.quote(str(sockets))} -c fsync=off"
    return runner.run(
        "pg_ctl",
        "start",
        "-D",
        str(data),
        "-l",
        str(log),
        "-w",
        "-t",
        str(START_TIMEOUT_S),
        "-o",
        options,
        timeout=START_TIMEOUT_S + 10,
    )


def stop_cluster(base_dir: Path) -> None:
    """Stop the cluster `throwaway_cluster(base_dir)` runs (fast: sessions are disconnected)."""
    base_dir = base_dir.resolve()
    runner = _Runner(find_bin_dir(), cwd=base_dir)
    stopped = runner.run(
        "pg_ctl", "stop", "-D", str(base_dir / "data"), "-m", "fast", "-w", timeout=60
    )
    if stopped.returncode != 0:
        raise RuntimeError(f"pg_ctl stop failed: {stopped.stderr}")


def start_cluster(base_dir: Path, url: str) -> None:
    """Start a cluster stopped by `stop_cluster` again, on the port of its `url`."""
    base_dir = base_dir.resolve()
    runner = _Runner(find_bin_dir(), cwd=base_dir)
    data, sockets, log = base_dir / "data", base_dir / "sockets", base_dir / "server.log"
    port = int(url.rsplit(":", 1)[1].split("/", 1)[0])
    # Once in CI pg_ctl exited non-zero with nothing on stderr and nothing in the server log
    # (killed, it seems); a second try is what an operator would do too.
    for attempt in range(_RESTART_ATTEMPTS):
        started = _pg_ctl_start(runner, data, log, port, sockets)
        if started.returncode == 0:
            return
        time.sleep(1.0 + attempt)
    raise RuntimeError(
        f"pg_ctl start exited {started.returncode}: {started.stdout}{started.stderr}\n"
        f"server log ({log}):\n{_log_tail(log)}"
    )


def _start(runner: _Runner, data: Path, sockets: Path, log: Path) -> int:
    """Start the server on a free port; another process may take the port first, so retry."""
    for _ in range(3):
        port = free_port()
        log.unlink(missing_ok=True)
        result = _pg_ctl_start(runner, data, log, port, sockets)
        if result.returncode == 0:
            return port
        tail = _log_tail(log)
        if "could not bind" not in tail:
            break
    raise RuntimeError(
        f"PostgreSQL did not start within {START_TIMEOUT_S} s: {result.stderr}\n"
        f"server log ({log}):\n{tail}"
    )


# -- the PostgreSQL the tests use --------------------------------------------------------------

DEFAULT_POSTGRES_URL = "postgresql://postgres@127.0.0.1:5432/test"
_PROBE_TIMEOUT_S = 3


class NoPostgres(Exception):
    """Neither the configured server nor a throwaway cluster can be had; the message says why."""


def unreachable(url: str) -> str | None:
    """Why `url` cannot be reached, or None when it can."""
    import psycopg

    try:
        with psycopg.connect(url, connect_timeout=_PROBE_TIMEOUT_S):
            return None
    except psycopg.Error as error:
        return str(error).strip()


@contextmanager
def postgres_for_tests() -> Iterator[str]:
    """TIERANK_TEST_POSTGRES_URL (default: the local server); where it does not answer, a
    throwaway cluster for as long as the block lasts. Raises NoPostgres when neither works."""
    url = os.environ.get("TIERANK_TEST_POSTGRES_URL", DEFAULT_POSTGRES_URL)
    problem = unreachable(url)
    if problem is None:
        yield url
        return
    # Not pytest's tmp_path: as root the cluster runs as an unprivileged user, who cannot enter
    # pytest's directories.
    base_dir = Path(tempfile.mkdtemp(prefix="tierank-pg-"))
    try:
        try:
            cluster = throwaway_cluster(base_dir)
            started = cluster.__enter__()
        except RuntimeError as error:
            raise NoPostgres(
                f"{url}: {problem}; a throwaway cluster did not start: {error}"
            ) from None
        try:
            yield started
        finally:
            cluster.__exit__(None, None, None)
    finally:
        shutil.rmtree(base_dir, ignore_errors=True)


def fresh_schema() -> str:
    return f"test_{uuid.uuid4().hex[:12]}"


def drop_schema(url: str, schema: str) -> None:
    import psycopg
    from psycopg import sql

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))


def schema_url_for(url: str, schema: str) -> str:
    """`url` with `schema` created and first on the search path (a libpq option), as an
    operator gives a server one schema of a shared database."""
    import psycopg
    from psycopg import sql

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(schema)))
    return f"{url}?options={quote(f'-csearch_path={schema}')}"
