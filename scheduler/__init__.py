"""The tournament: vote tallies, majority graph, tiers, batch choice and stop rules.

Pure, synchronous and deterministic; no I/O. The server drives a `Tournament` with judge calls.
"""

from tierank.scheduler.selection import BatchStrategy, FrontierStrategy, SelectionView
from tierank.scheduler.tournament import (
    FIRST_STAGE_PLACES_PER_NET_WIN,
    FIRST_STAGE_PRIOR_LEAN,
    MAX_ASKS_PER_PAIR,
    PLANNER_VERSION,
    Tournament,
)
from tierank.scheduler.types import (
    Budget,
    Cost,
    JudgeCall,
    StopReason,
    Tier,
    TournamentConfig,
    Verdict,
)

__all__ = [
    "FIRST_STAGE_PLACES_PER_NET_WIN",
    "FIRST_STAGE_PRIOR_LEAN",
    "MAX_ASKS_PER_PAIR",
    "PLANNER_VERSION",
    "BatchStrategy",
    "Budget",
    "Cost",
    "FrontierStrategy",
    "JudgeCall",
    "SelectionView",
    "StopReason",
    "Tier",
    "Tournament",
    "TournamentConfig",
    "Verdict",
]
