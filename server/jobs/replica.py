"""This server as one replica among those sharing a database: its identity and lease timing."""

from __future__ import annotations

import os
import secrets
import socket
from dataclasses import dataclass

# Leases are renewed, and free jobs looked for, this often at most; a lease outlives about four
# missed renewals, so a slow database round trip never loses one.
MAX_TICK_S = 1.0


def new_replica_id() -> str:
    """Unique per process, and readable in pg_stat_activity and the logs: host, pid, random."""
    return f"{socket.gethostname()}-{os.getpid()}-{secrets.token_hex(3)}"


@dataclass(frozen=True)
class Replica:
    replica_id: str
    # A replica that dies (kill -9) has its jobs taken over once its leases expire: at most this
    # long (the server's --lease-seconds), plus one tick.
    lease_s: float
    # Whether it takes up unfinished jobs nobody runs (after a restart, or a replica's death);
    # without, it runs only the jobs created or cancelled on it (the CLI's embedded server).
    takes_free_jobs: bool = True

    @property
    def tick_s(self) -> float:
        return min(MAX_TICK_S, self.lease_s / 4)
