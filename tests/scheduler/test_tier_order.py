"""How a tier lists its tied members: net wins inside it, the first-stage order as a prior."""

from itertools import combinations

from tierank.scheduler import FIRST_STAGE_PLACES_PER_NET_WIN, StopReason, Tournament
from tierank.scheduler.types import TournamentConfig

IDS = [f"d{i}" for i in range(12)]
# Three transitive judges whose pairwise majorities form one strongly connected tier of 12.
JUDGE_ORDERS = [
    [2, 11, 9, 5, 1, 7, 4, 10, 0, 6, 3, 8],
    [10, 6, 4, 8, 11, 1, 2, 5, 0, 3, 9, 7],
    [0, 6, 2, 7, 3, 8, 4, 1, 10, 5, 9, 11],
]


def majority_net_wins() -> list[int]:
    positions = [{c: i for i, c in enumerate(order)} for order in JUDGE_ORDERS]
    net = [0] * len(IDS)
    for a, b in combinations(range(len(IDS)), 2):
        a_wins = sum(p[a] < p[b] for p in positions) * 2 > len(positions)
        winner, loser = (a, b) if a_wins else (b, a)
        net[winner] += 1
        net[loser] -= 1
    return net


def single_tier_after_one_batch(sim):
    # One batch of all twelve goes to the three judges at once; any one verdict alone would
    # settle a total order, so all three are recorded before the tiers are read.
    judges = [sim.oracle([IDS[i] for i in order]) for order in JUDGE_ORDERS]
    config = TournamentConfig(batch_size=12, top_k=0, judge_weights=(1.0, 1.0, 1.0))
    tournament = Tournament(IDS, config)
    calls = tournament.plan()
    assert sorted(call.judge for call in calls) == [0, 1, 2]
    for call in calls:
        tournament.record(judges[call.judge](call))
    assert tournament.stop_reason() is StopReason.SETTLED
    (tier,) = tournament.tiers()
    return tier


def test_a_tier_lists_members_by_net_wins_inside_it_with_the_first_stage_prior(sim):
    tier = single_tier_after_one_batch(sim)
    net = majority_net_wins()
    places = FIRST_STAGE_PLACES_PER_NET_WIN
    expected = sorted(range(len(IDS)), key=lambda i: (i - places * net[i], i))
    assert tier.members == tuple(IDS[i] for i in expected)
    assert tier.members != tuple(IDS)
    # The prior at work: d11 has more net wins than d0 but sits eleven first-stage places below.
    assert net[11] > net[0]
    assert tier.members.index("d0") < tier.members.index("d11")
