"""Two commands on the default database (issue 22, item 23): the second one, refused the
database while the first one's embedded server holds it, names that server's address, and the
--server it suggests works."""

from __future__ import annotations

import os
import re
import signal
import subprocess
from pathlib import Path

from cli_process import POOL, QUERY, REPO_ROOT, TIERANK, cli_environment, tierank


def test_a_second_command_names_the_embedded_server_that_holds_the_database(
    tmp_path: Path,
) -> None:
    home = {"XDG_DATA_HOME": str(tmp_path)}
    first = subprocess.Popen(
        [*TIERANK, "rank", POOL, "--query", QUERY, "--judge", "oracle?latency_ms=3000",
         "--max-in-flight", "1", "--format", "trec"],
        cwd=REPO_ROOT, env=cli_environment(home), stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE, text=True, start_new_session=True,
    )  # fmt: skip
    try:
        assert first.stderr is not None
        name = first.stderr.readline().split()[2].rstrip(":")  # "#1 accepted jobs/...:"
        second = tierank("jobs", env=home)
        hint = re.search(r"pass --server (\S+) to use that server while it runs$", second.stderr)
        assert second.returncode == 1
        assert hint is not None, second.stderr
        assert len(second.stderr.splitlines()) == 1
        followed = tierank("jobs", "--server", hint[1], env=home)
        assert followed.returncode == 0, followed.stderr
        assert any(line.split()[:2] == [name, "running"] for line in followed.stdout.splitlines())
    finally:
        os.killpg(first.pid, signal.SIGINT)
        first.communicate(timeout=60)
