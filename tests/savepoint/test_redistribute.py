"""Operator list state redistribution on restore: even split and union (Flink's round-robin repartitioner)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from statekit.errors import ParallelismError, StatekitError
from statekit.savepoint import redistribute_list_state

snapshots = st.lists(st.lists(st.integers(), max_size=8), max_size=6)
parallelisms = st.integers(1, 12)


def test_examples():
    assert redistribute_list_state([[1, 2, 3], [4, 5]], 3) == [[1, 2], [3, 4], [5]]
    assert redistribute_list_state([[1, 2, 3], [4, 5]], 1) == [[1, 2, 3, 4, 5]]
    assert redistribute_list_state([[1], []], 4) == [[1], [], [], []]
    assert redistribute_list_state([], 2) == [[], []]
    assert redistribute_list_state([[1], [2]], 3, "union") == [[1, 2], [1, 2], [1, 2]]
    assert redistribute_list_state([[], []], 2, "union") == [[], []]


@settings(max_examples=200, deadline=None)
@given(snapshots, parallelisms)
def test_split_loses_nothing_duplicates_nothing_keeps_order_and_balances(per_subtask, p):
    # Tag each element with its origin so equal values cannot hide a loss or a duplicate.
    tagged = [[(s, i, v) for i, v in enumerate(items)] for s, items in enumerate(per_subtask)]
    out = redistribute_list_state(tagged, p, "split")
    assert len(out) == p
    flat_in = [x for items in tagged for x in items]
    assert [x for items in out for x in items] == flat_in  # same elements, same order, once each
    sizes = [len(items) for items in out]
    assert max(sizes) - min(sizes) <= 1
    assert sizes == sorted(sizes, reverse=True)  # the first subtasks take the remainder


@settings(max_examples=200, deadline=None)
@given(snapshots, parallelisms)
def test_union_gives_every_subtask_the_whole_list_in_order(per_subtask, p):
    out = redistribute_list_state(per_subtask, p, "union")
    flat = [x for items in per_subtask for x in items]
    assert out == [flat] * p
    out[0].append("mutated")
    assert all(items == flat for items in out[1:]), "subtasks must not share one list object"


@settings(max_examples=100, deadline=None)
@given(snapshots, parallelisms, parallelisms)
def test_rescaling_twice_is_rescaling_once(per_subtask, p1, p2):
    once = redistribute_list_state(per_subtask, p2)
    twice = redistribute_list_state(redistribute_list_state(per_subtask, p1), p2)
    assert once == twice


def test_input_is_not_modified():
    per_subtask = [[1, 2], [3]]
    redistribute_list_state(per_subtask, 3)
    redistribute_list_state(per_subtask, 2, "union")
    assert per_subtask == [[1, 2], [3]]


@pytest.mark.parametrize("p", [0, -1, 32769])
def test_bad_parallelism(p):
    with pytest.raises(ParallelismError):
        redistribute_list_state([[1]], p)


def test_bad_mode():
    with pytest.raises(StatekitError, match="split.*union"):
        redistribute_list_state([[1]], 2, "broadcast")  # type: ignore[arg-type]
