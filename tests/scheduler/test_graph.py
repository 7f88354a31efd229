"""Vote tallies and the majority graph on their own, without a tournament."""

from itertools import combinations

from hypothesis import given
from hypothesis import strategies as st

from tierank.scheduler.graph import MajorityGraph, _strict_reach
from tierank.scheduler.votes import VoteTally


def graph_from(tally_orderings: list[tuple[int, tuple[int, ...]]], size: int, weights):
    tally = VoteTally(weights)
    graph = MajorityGraph(size)
    for judge, ordering in tally_orderings:
        graph.apply(tally.add_ordering(judge, ordering))
    return tally, graph


def test_ordering_yields_all_pairs_weighted():
    tally = VoteTally([2.0])
    tally.add_ordering(0, (3, 1, 2))
    assert tally.wins(3, 1) == tally.wins(3, 2) == tally.wins(1, 2) == 2.0
    assert tally.wins(1, 3) == tally.wins(2, 3) == tally.wins(2, 1) == 0.0
    assert tally.direction(3, 2) == 1 and tally.direction(2, 3) == -1


def test_opposite_votes_of_equal_weight_are_a_tie_with_no_edge():
    tally, graph = graph_from([(0, (0, 1)), (1, (1, 0))], 2, [1.0, 1.0])
    assert tally.direction(0, 1) == 0
    assert not graph.has_edge(0, 1) and not graph.has_edge(1, 0)
    standings = graph.standings()
    assert standings.unknown_bits[standings.component_of[0]] == 0b10


def test_heavier_judge_wins_and_a_flip_replaces_the_edge():
    tally, graph = graph_from([(0, (0, 1))], 2, [1.0, 3.0])
    assert graph.has_edge(0, 1)
    graph.apply(tally.add_ordering(1, (1, 0)))
    assert graph.has_edge(1, 0) and not graph.has_edge(0, 1)


def test_weights_that_sum_inexactly_still_tie():
    # 0.1 + 0.2 != 0.3 in floating point; it must still count as a tie.
    tally, _ = graph_from([(0, (0, 1)), (1, (0, 1)), (2, (1, 0))], 2, [0.1, 0.2, 0.3])
    assert tally.direction(0, 1) == 0


def test_single_judge_cycle_is_one_component():
    # The judge states a>b, b>c and c>a in three separate pairwise verdicts.
    _, graph = graph_from([(0, (0, 1)), (0, (1, 2)), (0, (2, 0)), (0, (2, 3))], 4, [1.0])
    standings = graph.standings()
    cycle = standings.component_of[0]
    assert standings.component_of[1] == standings.component_of[2] == cycle
    assert standings.component_members[cycle] == (0, 1, 2)
    assert standings.below_bits[cycle] == 1 << 3
    assert standings.above_count[3] == 3 and standings.below_count[0] == 1
    assert standings.components_best_first[0] == cycle


@given(
    st.integers(2, 7).flatmap(
        lambda n: st.tuples(
            st.just(n),
            st.lists(st.permutations(range(n)).map(tuple), min_size=1, max_size=6),
            st.lists(st.integers(0, 1), min_size=6, max_size=6),
        )
    )
)
def test_standings_match_a_brute_force_closure(case):
    size, orderings, judges = case
    stated = [(judge, ordering) for judge, ordering in zip(judges, orderings, strict=False)]
    tally, graph = graph_from(stated, size, [1.0, 1.5])
    reach = {(a, b) for a in range(size) for b in range(size) if tally.direction(a, b) > 0}
    for k in range(size):  # Floyd–Warshall: k outermost
        for i in range(size):
            for j in range(size):
                if (i, k) in reach and (k, j) in reach:
                    reach.add((i, j))
    standings = graph.standings()
    for a, b in combinations(range(size), 2):
        same = standings.component_of[a] == standings.component_of[b]
        assert same == ((a, b) in reach and (b, a) in reach)
        if not same:
            assert bool(standings.below_bits[standings.component_of[a]] >> b & 1) == (
                (a, b) in reach
            )
            assert bool(standings.above_bits[standings.component_of[a]] >> b & 1) == (
                (b, a) in reach
            )
    order = standings.components_best_first
    position = {component: index for index, component in enumerate(order)}
    for a, b in reach:
        assert position[standings.component_of[a]] <= position[standings.component_of[b]]


@given(
    st.integers(1, 12).flatmap(
        lambda n: st.tuples(
            st.just(n),
            st.lists(st.tuples(st.integers(0, n - 1), st.integers(0, n - 1)), max_size=40),
            st.randoms(use_true_random=False),
        )
    )
)
def test_strict_reach_is_the_same_in_any_visit_order(case):
    # standings() relies on igraph numbering components in a topological order only for speed;
    # the reach sets must not depend on that order.
    size, edges, rng = case
    graph = MajorityGraph(size)
    # One change per pair, as VoteTally reports them.
    directions = {(min(a, b), max(a, b)): 1 if a < b else -1 for a, b in edges if a != b}
    graph.apply([(low, high, direction) for (low, high), direction in directions.items()])
    standings = graph.standings()
    component_of = list(standings.component_of)
    component_bits = list(standings.component_bits)
    shuffled = list(range(len(component_bits)))
    rng.shuffle(shuffled)
    for neighbours, expected in (
        (graph._successors, standings.below_bits),
        (graph._predecessors, standings.above_bits),
    ):
        reach = _strict_reach(neighbours, component_of, component_bits, shuffled)
        assert tuple(reach) == expected


@given(
    st.lists(
        st.tuples(st.integers(0, 2), st.permutations(range(5)), st.integers(0, 5)),
        max_size=12,
    ),
    st.sampled_from([(1.0, 1.0, 1.0), (0.1, 0.2, 0.3), (2.0, 0.5, 0.0)]),
)
def test_reported_changes_are_exactly_the_pairs_whose_direction_flipped(stated, weights):
    tally = VoteTally(weights)
    for judge, permutation, length in stated:
        before = {pair: tally.direction(*pair) for pair in combinations(range(5), 2)}
        changes = tally.add_ordering(judge, tuple(permutation[:length]))
        after = {pair: tally.direction(*pair) for pair in combinations(range(5), 2)}
        expected = [(low, high, after[low, high]) for low, high in after]
        expected = [change for change in expected if before[change[:2]] != change[2]]
        assert sorted(changes) == expected
