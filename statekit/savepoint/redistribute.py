"""Redistribution of operator list state on restore, as Flink's round-robin repartitioner does it."""

from __future__ import annotations

from typing import Any, Literal, Sequence

from statekit.errors import InvalidArgumentError
from statekit.keygroups import check_parallelism


def redistribute_list_state(
    per_subtask: Sequence[Sequence[Any]], new_parallelism: int, mode: Literal["split", "union"] = "split"
) -> list[list[Any]]:
    """Give each of `new_parallelism` subtasks its share of a list state snapshotted per subtask.

    ``split`` concatenates the old subtasks' lists in subtask order and cuts the result into
    contiguous, even chunks (the first ``total % p`` subtasks get one element more); ``union``
    gives every subtask the whole concatenation.

    >>> redistribute_list_state([[1, 2, 3], [4, 5]], 3)
    [[1, 2], [3, 4], [5]]
    >>> redistribute_list_state([[1], [2]], 3, "union")
    [[1, 2], [1, 2], [1, 2]]
    """
    check_parallelism(new_parallelism)
    flat = [item for items in per_subtask for item in items]
    if mode == "union":
        return [list(flat) for _ in range(new_parallelism)]
    if mode != "split":
        raise InvalidArgumentError(
            f"mode must be 'split' or 'union', not {mode!r}; broadcast state is not redistributed (each subtask "
            "gets the one copy)."
        )
    base, extra = divmod(len(flat), new_parallelism)
    out, pos = [], 0
    for i in range(new_parallelism):
        n = base + (1 if i < extra else 0)
        out.append(flat[pos : pos + n])
        pos += n
    return out
