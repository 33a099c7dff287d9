"""`write_keyed_batches`: a keyed table written batch by batch (ascending, disjoint key groups) as it is produced."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

from statekit.errors import InvalidArgumentError
from statekit.format.keyed import compute_key_groups
from statekit.savepoint import Savepoint, SavepointBuilder
from statekit.savepoint.check import check
from statekit.state import ValueStateDescriptor

N = 5000


def _table() -> pa.Table:
    """Keys with their key groups (max parallelism 128), sorted by key group."""
    keys = pa.array([f"user-{i}" for i in range(N)])
    t = pa.table({"key_group": pa.array(compute_key_groups(keys, 128, "string")), "key": keys,
                  "count": pa.array(range(N), pa.int64())})
    return t.sort_by("key_group")


def _by_key_groups(t: pa.Table, cuts: list[int]) -> list[pa.Table]:
    kg = t.column("key_group").to_pylist()
    bounds = [0] + [kg.index(c) for c in cuts] + [len(kg)]
    return [t.slice(a, b - a) for a, b in zip(bounds, bounds[1:])]


def _write(path: Path, batches=None, table=None) -> Path:
    with SavepointBuilder(path, rows_per_file=700) as b:
        op = b.add_operator("counter", parallelism=2, max_parallelism=128, key_type="string",
                            keyed_states=[ValueStateDescriptor("count", "bigint")])
        if table is not None:
            op.write_keyed(table)
        if batches is not None:
            op.write_keyed_batches(batches)
    return path


def test_batches_give_the_savepoint_one_table_gives(tmp_path: Path) -> None:
    t = _table()
    produced = []

    def batches():  # consumed at commit, one after the other
        for part in _by_key_groups(t, [10, 11, 64, 100]):
            produced.append(part.num_rows)
            yield part

    a = Savepoint.open(_write(tmp_path / "batches", batches=batches()))
    b = Savepoint.open(_write(tmp_path / "whole", table=t))
    assert len(produced) == 5
    assert a.keyed_table("counter", with_key_group=True).equals(b.keyed_table("counter", with_key_group=True))
    assert a.get("counter", "user-42") == {"count": 42}
    assert check(tmp_path / "batches").ok


def test_overlapping_batches_are_refused_and_nothing_is_published(tmp_path: Path) -> None:
    t = _table()
    parts = _by_key_groups(t, [64])
    closed = []

    def batches():
        try:
            yield from [parts[1], parts[0], parts[1]]
        finally:
            closed.append(True)  # the producer is stopped when the write fails, not left suspended

    with pytest.raises(InvalidArgumentError, match="ascending, disjoint key-group ranges"):
        _write(tmp_path / "sp", batches=batches())
    assert closed == [True]
    assert not (tmp_path / "sp").exists()
    assert list(tmp_path.iterdir()) == []  # no staging left behind either


def test_a_failing_producer_publishes_nothing(tmp_path: Path) -> None:
    t = _table()

    def batches():
        yield from _by_key_groups(t, [64])[:1]
        raise RuntimeError("the source went away")

    with pytest.raises(RuntimeError, match="went away"):
        _write(tmp_path / "sp", batches=batches())
    assert list(tmp_path.iterdir()) == []


def test_one_table_and_batches_together_are_refused(tmp_path: Path) -> None:
    t = _table()
    with pytest.raises(InvalidArgumentError, match="both as one table and as batches"):
        _write(tmp_path / "sp", batches=iter([t]), table=t)
    assert list(tmp_path.iterdir()) == []
