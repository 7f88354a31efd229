"""The audit log: one structured line per admin action and per denied call (who, what, when).

Lines carry `audit=true` and `logger="tierank.audit"`, so a log pipeline can route them apart
from operational logs. They name keys by id, never by secret.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import structlog

if TYPE_CHECKING:
    from tierank.server.rpc.auth import Caller

_LOGGER = "tierank.audit"


def _who(caller: Caller | None) -> dict[str, str]:
    if caller is None:
        return {"who": "unauthenticated"}
    return {"who": caller.who, "who_tenant": caller.tenant, "who_role": caller.role}


def denied(caller: Caller | None, rpc: str, why: str) -> None:
    structlog.get_logger().warning(
        "call denied",
        logger=_LOGGER,
        audit=True,
        what=rpc,
        outcome="denied",
        why=why,
        **_who(caller),
    )


def admin_action(caller: Caller, rpc: str, target: str, **details: object) -> None:
    structlog.get_logger().info(
        "admin action",
        logger=_LOGGER,
        audit=True,
        what=rpc,
        target=target,
        outcome="done",
        **_who(caller),
        **details,
    )
