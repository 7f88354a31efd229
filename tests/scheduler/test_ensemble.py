"""Several judges: cycles among them, adaptive escalation, disabled judges, agreement."""

from collections import defaultdict

from tierank.scheduler import (
    MAX_ASKS_PER_PAIR,
    Cost,
    JudgeCall,
    StopReason,
    Tournament,
    TournamentConfig,
    Verdict,
)

IDS = [f"doc{i}" for i in range(20)]


def reorder(base: list[str], planted: list[str]) -> list[str]:
    """`base` with the planted ids put, in the given order, where the planted ids were."""
    slots = iter(planted)
    return [next(slots) if c in planted else c for c in base]


def test_condorcet_cycle_of_the_ensemble_is_one_tier(sim):
    a, b, c = "doc3", "doc4", "doc5"
    # Each judge is transitive; pairwise majorities are a>b, b>c and c>a.
    judges = [sim.oracle(reorder(IDS, rotation)) for rotation in ([a, b, c], [b, c, a], [c, a, b])]
    config = TournamentConfig(batch_size=10, top_k=0, judge_weights=(1.0, 1.0, 1.0))
    tournament = Tournament(IDS, config)
    sim.drive(tournament, sim.by_judge(judges))

    assert tournament.stop_reason() is StopReason.SETTLED
    tiers = tournament.tiers()
    assert [set(t.members) for t in tiers] == [{x} for x in IDS[:3]] + [{a, b, c}] + [
        {x} for x in IDS[6:]
    ]
    assert all(tier.settled for tier in tiers)


def test_a_cycle_straddling_the_top_k_boundary_is_kept_whole(sim):
    a, b, c = "doc3", "doc4", "doc5"
    judges = [sim.oracle(reorder(IDS, rotation)) for rotation in ([a, b, c], [b, c, a], [c, a, b])]
    config = TournamentConfig(batch_size=10, top_k=5, judge_weights=(1.0, 1.0, 1.0))
    tournament = Tournament(IDS, config)
    sim.drive(tournament, sim.by_judge(judges))

    assert tournament.stop_reason() is StopReason.SETTLED
    head = [set(tier.members) for tier in tournament.tiers()[:4]]
    assert head == [{"doc0"}, {"doc1"}, {"doc2"}, {a, b, c}]


def test_all_mode_gives_every_batch_to_every_judge_in_its_own_shuffle(sim):
    config = TournamentConfig(batch_size=5, top_k=0, judge_weights=(1.0, 1.0, 1.0), seed=11)
    planned = sim.drive(Tournament(IDS, config), sim.oracle(IDS))
    by_batch: dict[int, list[JudgeCall]] = defaultdict(list)
    for call in planned:
        by_batch[call.batch].append(call)
    assert all(sorted(c.judge for c in calls) == [0, 1, 2] for calls in by_batch.values())
    assert all(len({frozenset(c.presented) for c in calls}) == 1 for calls in by_batch.values())
    shuffled_differently = [len({c.presented for c in calls}) > 1 for calls in by_batch.values()]
    assert sum(shuffled_differently) > len(by_batch) / 2


def test_adaptive_asks_the_next_judge_only_where_the_quorum_disagreed_again(sim):
    # Judges 0 and 2 know the truth; judge 1 swaps two neighbours, so it disagrees with
    # judge 0 exactly on batches showing both. The first such batch leaves the pair open; the
    # next one showing it goes to judge 2.
    x, y = "doc2", "doc3"
    judges = [sim.oracle(IDS), sim.oracle(reorder(IDS, [y, x])), sim.oracle(IDS)]
    config = TournamentConfig(
        batch_size=5, top_k=0, judge_weights=(1.0, 1.0, 1.0), ensemble="adaptive", quorum=2
    )
    tournament = Tournament(IDS, config)
    planned = sim.drive(tournament, sim.by_judge(judges))

    members = {call.batch: set(call.presented) for call in planned}
    contested = {batch for batch, ids in members.items() if {x, y} <= ids}
    escalated = {call.batch for call in planned if call.judge == 2}
    first_dispute = min(contested)
    assert len(contested) >= 2 and escalated == contested - {first_dispute}
    assert all(
        sorted(c.judge for c in planned if c.batch == batch) == [0, 1]
        for batch in members
        if batch not in contested
    )
    assert sim.flat(tournament) == IDS


def test_adaptive_without_disagreement_never_goes_beyond_the_quorum(sim):
    config = TournamentConfig(
        batch_size=4, top_k=3, judge_weights=(1.0, 1.0, 1.0, 1.0), ensemble="adaptive", quorum=2
    )
    planned = sim.drive(Tournament(IDS, config), sim.oracle(IDS))
    assert {call.judge for call in planned} == {0, 1}


def test_adaptive_screens_the_first_waves_tail_with_one_quorum_judge_in_turn(sim):
    ids = [f"doc{i}" for i in range(40)]
    config = TournamentConfig(
        batch_size=5, top_k=2, judge_weights=(1.0, 1.0, 1.0), ensemble="adaptive", quorum=2
    )
    tournament = Tournament(ids, config)
    planned = sim.drive(tournament, sim.oracle(ids))

    first_wave = [tuple(ids[i : i + 5]) for i in range(0, 40, 5)]
    judges_by_batch: dict[tuple[str, ...], list[int]] = defaultdict(list)
    for call in planned:
        judges_by_batch[tuple(sorted(call.presented, key=ids.index))].append(call.judge)
    # The head is the first SCREENING_HEAD_FACTOR * top_k = 6 candidates: the batches holding
    # any of them meet the quorum; the tail's batches go to judges 0 and 1 in turn.
    assert [sorted(judges_by_batch[batch]) for batch in first_wave[:2]] == [[0, 1], [0, 1]]
    assert [judges_by_batch[batch] for batch in first_wave[2:]] == [[0], [1]] * 3
    assert 2 not in {call.judge for call in planned}
    assert sim.flat(tournament)[:2] == ids[:2]
    # Later batches, which compare the survivors, meet the quorum again.
    later = [batch for batch in judges_by_batch if batch not in first_wave]
    assert later and all(sorted(judges_by_batch[batch]) == [0, 1] for batch in later)


def test_adaptive_full_ordering_screens_nothing(sim):
    ids = [f"doc{i}" for i in range(20)]
    config = TournamentConfig(
        batch_size=5, top_k=0, judge_weights=(1.0, 1.0, 1.0), ensemble="adaptive", quorum=2
    )
    first_calls = Tournament(ids, config).plan()
    judges_by_batch: dict[int, list[int]] = defaultdict(list)
    for call in first_calls:
        judges_by_batch[call.batch].append(call.judge)
    assert {batch: sorted(judges) for batch, judges in judges_by_batch.items()} == {
        batch: [0, 1] for batch in range(4)
    }


def test_disabled_judge_gets_no_new_calls(sim):
    config = TournamentConfig(batch_size=5, top_k=0, judge_weights=(1.0, 1.0))
    tournament = Tournament(IDS, config)
    first_calls = tournament.plan()
    tournament.disable_judge(1)
    for call in first_calls:
        tournament.record(sim.oracle(IDS)(call))
    later = sim.drive(tournament, sim.oracle(IDS))
    assert later and all(call.judge == 0 for call in later)
    assert sim.flat(tournament) == IDS


def test_disabling_every_judge_stops_the_tournament():
    tournament = Tournament(IDS, TournamentConfig(judge_weights=(1.0, 1.0)))
    tournament.plan()
    tournament.disable_judge(0)
    assert tournament.stop_reason() is None
    tournament.disable_judge(1)
    assert tournament.stop_reason() is StopReason.JUDGES_UNAVAILABLE
    assert tournament.plan() == []


def test_judges_that_always_tie_exhaust_the_tournament_without_looping(sim):
    """Equal weights, opposite answers: every pair ties, re-asking cannot help, so it ends."""
    judges = [sim.oracle(IDS), sim.oracle(IDS[::-1])]
    config = TournamentConfig(batch_size=5, top_k=0, judge_weights=(1.0, 1.0))
    tournament = Tournament(IDS, config)
    planned = sim.drive(tournament, sim.by_judge(judges))
    assert tournament.stop_reason() is StopReason.EXHAUSTED
    assert not any(tier.settled for tier in tournament.tiers())
    # Every batch after the first wave re-asks some open pair, each at most the cap.
    first_wave, pairs = 4, len(IDS) * (len(IDS) - 1) // 2
    assert len({call.batch for call in planned}) <= first_wave + pairs * MAX_ASKS_PER_PAIR


def test_judge_agreement_compares_stated_pairs_with_the_weighted_majority(sim):
    judges = [sim.oracle(IDS), sim.oracle(IDS[::-1]), sim.oracle(IDS)]
    config = TournamentConfig(batch_size=5, top_k=0, judge_weights=(2.0, 1.0, 0.5))
    tournament = Tournament(IDS, config)
    first_calls = tournament.plan()
    tournament.disable_judge(2)
    for call in first_calls:
        if call.judge == 2:  # its breaker opened: the server records the call as failed
            tournament.record(Verdict(call.call_id, failed=True))
        else:
            tournament.record(sim.by_judge(judges)(call))
    sim.drive(tournament, sim.by_judge(judges))
    assert tournament.judge_agreement() == [1.0, 0.0, None]
    assert sim.flat(tournament) == IDS


def test_weighted_minority_does_not_win(sim):
    judges = [sim.oracle(IDS[::-1]), sim.oracle(IDS)]
    config = TournamentConfig(batch_size=5, top_k=0, judge_weights=(1.0, 1.5))
    tournament = Tournament(IDS, config)
    sim.drive(tournament, sim.by_judge(judges))
    assert sim.flat(tournament) == IDS
    assert tournament.votes_for(IDS[0], IDS[1]) == 1.5 * tournament.votes_for(IDS[1], IDS[0])


def test_failed_verdicts_cost_what_they_cost():
    tournament = Tournament(IDS, TournamentConfig(batch_size=10, max_in_flight=2))
    for call in tournament.plan():
        tournament.record(Verdict(call.call_id, failed=True, cost=Cost(calls=1, cost_usd=0.5)))
    assert tournament.spent == Cost(calls=2, cost_usd=1.0)
