"""TREC pooling: the pool of each query, its order, and what a run added later contributes."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tierank.evaluation import pool_additions, pool_runs, rank_documents

RUNS = {
    # Scores, not ranks: "a" ranks d1, d2, d3; "b" ranks d3, d4, d1; "c" ranks d3, d2.
    "a": {"q1": {"d1": 3.0, "d2": 2.0, "d3": 1.0}, "q2": {"x": 1.0}},
    "b": {"q1": {"d3": 5.0, "d4": 4.0, "d1": 0.1}},
    "c": {"q1": {"d3": 9.0, "d2": 8.0}},
}


def _as_tuples(pool):
    return {qid: [(d.docid, d.retrieved_by) for d in docs] for qid, docs in pool.items()}


def test_pool_to_depth_two_by_hand():
    pool = pool_runs(RUNS, depth=2)
    assert _as_tuples(pool) == {
        "q1": [
            # Best rank 1 for d3 (b and c) and d1 (a): two systems before one.
            ("d3", {"b": 1, "c": 1}),
            ("d1", {"a": 1}),
            # Best rank 2: d2 (a and c) before d4 (b alone). d1 is b's third, outside depth 2.
            ("d2", {"a": 2, "c": 2}),
            ("d4", {"b": 2}),
        ],
        "q2": [("x", {"a": 1})],
    }
    assert [d.best_rank for d in pool["q1"]] == [1, 1, 2, 2]


def test_equal_best_rank_and_system_count_fall_back_to_docid():
    pool = pool_runs({"a": {"q": {"m": 1.0}}, "b": {"q": {"k": 1.0}}}, depth=1)
    assert [d.docid for d in pool["q"]] == ["k", "m"]


def test_ranks_follow_trec_eval_order_not_insertion():
    # Equal scores: trec_eval puts the larger docid first.
    pool = pool_runs({"a": {"q": {"x": 1.0, "y": 1.0, "z": 2.0}}}, depth=3)
    assert _as_tuples(pool)["q"] == [("z", {"a": 1}), ("y", {"a": 2}), ("x", {"a": 3})]


def test_depth_must_be_positive():
    with pytest.raises(ValueError, match="at least 1"):
        pool_runs(RUNS, depth=0)
    with pytest.raises(ValueError, match="at least 1"):
        pool_additions({}, {}, "new", depth=0)


def test_a_query_without_documents_has_no_pool():
    assert pool_runs({"a": {"q": {}}, "b": {}}, depth=5) == {}
    assert pool_runs({}, depth=5) == {}


def test_additions_by_hand():
    pooled = pool_runs({"a": RUNS["a"], "b": RUNS["b"]}, depth=2)
    assert [d.docid for d in pooled["q1"]] == ["d1", "d3", "d2", "d4"]
    # Top 2 of the late run: d3 (pooled already) and a new document; d2 is its third. And a
    # query the pool lacks.
    late = {"q1": {"d3": 9.0, "new": 8.0, "d2": 7.0}, "q3": {"y": 1.0}}
    additions = pool_additions(pooled, late, "c", depth=2)
    assert additions.system == "c"
    assert _as_tuples(additions.added) == {"q1": [("new", {"c": 2})], "q3": [("y", {"c": 1})]}
    assert _as_tuples(additions.updated) == {"q1": [("d3", {"b": 1, "c": 1})]}
    merged = additions.merged_into(pooled)
    assert [d.docid for d in merged["q1"]] == ["d3", "d1", "d2", "d4", "new"]
    assert pooled["q1"][1].retrieved_by == {"b": 1}, "the pool given is left as it was"


def test_additions_refuse_a_system_already_pooled():
    pooled = pool_runs(RUNS, depth=2)
    with pytest.raises(ValueError, match="already in the pool"):
        pool_additions(pooled, RUNS["b"], "b", depth=2)


def test_a_run_inside_the_pool_adds_nothing():
    pooled = pool_runs(RUNS, depth=3)
    additions = pool_additions(pooled, {"q1": {"d1": 2.0, "d4": 1.0}}, "copy", depth=3)
    assert additions.added == {}
    assert [d.docid for d in additions.updated["q1"]] == ["d1", "d4"]


_runs = st.dictionaries(
    st.sampled_from(["s1", "s2", "s3", "s4"]),
    st.dictionaries(
        st.sampled_from(["q1", "q2", "q3"]),
        st.dictionaries(
            st.sampled_from([f"d{i}" for i in range(12)]),
            st.integers(0, 5).map(float),  # few distinct scores: many ties
            max_size=12,
        ),
        max_size=3,
    ),
    min_size=1,
    max_size=4,
)


@settings(max_examples=80, deadline=None)
@given(runs=_runs, depth=st.integers(1, 8))
def test_pool_records_each_systems_top_depth(runs, depth):
    pool = pool_runs(runs, depth)
    for system, run in runs.items():
        for qid, scores in run.items():
            top = {docid: rank for rank, docid in enumerate(rank_documents(scores)[:depth], 1)}
            recorded = {
                d.docid: d.retrieved_by[system]
                for d in pool.get(qid, [])
                if system in d.retrieved_by
            }
            assert recorded == top
    for documents in pool.values():
        assert len({d.docid for d in documents}) == len(documents)
        keys = [(d.best_rank, -len(d.retrieved_by), d.docid) for d in documents]
        assert keys == sorted(keys)


@settings(max_examples=80, deadline=None)
@given(runs=_runs, late=_runs, depth=st.integers(1, 8))
def test_adding_a_run_later_is_pooling_it_with_the_others(runs, late, depth):
    late_run = next(iter(late.values()))
    pooled = pool_runs(runs, depth)
    additions = pool_additions(pooled, late_run, "late", depth)
    assert additions.merged_into(pooled) == pool_runs({**runs, "late": late_run}, depth)
    for qid, documents in additions.added.items():
        assert not {d.docid for d in documents} & {d.docid for d in pooled.get(qid, [])}
    assert all("late" in d.retrieved_by for docs in additions.updated.values() for d in docs)
