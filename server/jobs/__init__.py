"""Ranking jobs: admitted (`JobManager`), run as tournaments against their judges (the
runner, one per running job, under a lease on its replica), their events published to watchers
(`EventHub`), and the EvalService's long requests run as operations (`OperationManager`).

Built by the composition root (server/app.py) on a `Storage` and a `JudgeFactory`; read by the
API edge (server/rpc). The tournament itself is the scheduler's; nothing here decides batches.
"""

from tierank.server.jobs.follow import follow_events
from tierank.server.jobs.hub import EventHub
from tierank.server.jobs.manager import JobManager
from tierank.server.jobs.operations import OperationFailed, OperationManager, OperationWork
from tierank.server.jobs.replica import Replica, new_replica_id

__all__ = [
    "EventHub",
    "JobManager",
    "OperationFailed",
    "OperationManager",
    "OperationWork",
    "Replica",
    "follow_events",
    "new_replica_id",
]
