"""The bulk writer of fixed-width SQL rows (statekit.format.flink.sqlfixed) writes the bytes of the general path
(`writer.keyed_runs`, `sqlwrite.row_bytes`): on every operator of the real Flink 2.3.0 SQL corpus it applies to, and
on that state with NULL fields, other row kinds, rows without the state and narrow / boolean / timestamp fields."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from statekit.errors import StateTypeError
from statekit.format.flink import sqlfixed
from statekit.format.flink.logical import LogicalType
from statekit.format.flink.sqlwrite import key_groups, row_bytes
from statekit.format.flink.writer import KeyedStateOut, keyed_runs, write_key_groups
from statekit.keygroups import key_group_range
from statekit.savepoint import Savepoint
from statekit.savepoint.flink_out import operator_data

SQL = Path(__file__).resolve().parents[2] / "fixtures" / "flink" / "sql"
CASES = [SQL / "2.3.0" / c / "savepoint" for c in ("plan-hashmap-canonical", "plan-rocksdb-canonical",
                                                    "default-hashmap-canonical", "default-hashmap-canonical-ttl")] + \
    [SQL / "2.3.0-types" / "plan-hashmap-types" / "savepoint"]


def _general(path: Path, layout, keyed: pa.Table, start: int, end: int) -> bytes:
    runs = keyed_runs(layout, keyed, None)
    with open(path, "wb") as f:
        f.write(layout.proxy())
        write_key_groups(f, runs, start, end, len(layout.proxy()))
    return path.read_bytes()


def _both(tmp_path: Path, layout, keyed: pa.Table, maxp: int) -> int:
    """Write every key-group range of `keyed` both ways; assert the bytes and offsets agree; the rows written."""
    kg = keyed.column("key_group").to_numpy()
    keyed = keyed.take(pa.array(np.argsort(kg, kind="stable")))
    kg = keyed.column("key_group").to_numpy()
    for i in range(2):
        rng = key_group_range(maxp, 2, i)
        lo, hi = np.searchsorted(kg, [rng.start, rng.end + 1])
        part = keyed.slice(int(lo), int(hi - lo))
        if not part.num_rows:
            continue
        written = sqlfixed.write_fixed_file(tmp_path / f"fixed-{i}", layout, part, rng.start, rng.end)
        assert written is not None
        offsets, size = written
        fast = (tmp_path / f"fixed-{i}").read_bytes()
        assert size == len(fast)
        slow = _general(tmp_path / f"general-{i}", layout, part, rng.start, rng.end)
        assert fast == slow
        runs = keyed_runs(layout, part, None)
        with open(tmp_path / f"again-{i}", "wb") as f:
            f.write(layout.proxy())
            assert offsets == write_key_groups(f, runs, rng.start, rng.end, len(layout.proxy()))
    return keyed.num_rows


def _fixed_operators():
    for path in CASES:
        sp = Savepoint.open(path)
        for m in sp.operators:
            if m.key_type is None:
                continue
            data = operator_data(sp, m)
            keyed = data.keyed
            if data.layout is None or not isinstance(keyed, pa.Table) or not keyed.num_rows:
                continue
            if sqlfixed.fixed_layout(data.layout, keyed.schema, data.timers is not None):
                yield f"{path.parent.name}/{m.uid or m.uid_hash}", data


def test_the_corpus_operators_it_applies_to_are_written_with_the_general_paths_bytes(tmp_path):
    seen = []
    for label, data in _fixed_operators():
        out = tmp_path / label.replace("/", "_")
        out.mkdir()
        assert _both(out, data.layout, data.keyed, data.max_parallelism) > 0
        seen.append(label)
    # the keep-first deduplication (BIGINT key, boolean flag) of each corpus case, the TTL case's aggregate (a row
    # under a TtlSerializer)
    assert len(seen) >= 4, seen
    assert any(data.layout.states[0].value.kind == "tuple" for _, data in _fixed_operators()), seen


def _with_row_state(data, types: list[LogicalType], row: pa.StructArray, row_kind: bool):
    """`data`'s layout and keys (a BIGINT key row) with one value state holding SQL rows of `types`."""
    from dataclasses import replace

    state = data.layout.states[0]
    value = replace(data.layout.key, logical=tuple(types), row_kind=row_kind)  # a RowDataSerializer
    layout = replace(data.layout, states=(KeyedStateOut("acc", "value", value, state.meta, "acc"),))
    return layout, data.keyed.select(["key_group", "key"]).append_column("acc", row)


def test_nulls_row_kinds_missing_state_and_narrow_fields_are_written_with_the_general_paths_bytes(tmp_path):
    label, data = next(iter(_fixed_operators()))
    n = data.keyed.num_rows
    vals = np.arange(n) - n // 2
    every = np.arange(n)
    # an aggregate's accumulator (count, sum, max, row_kind): NULLs, every row kind, a third of the rows without it
    acc = pa.StructArray.from_arrays(
        [pa.array(vals), pa.array(vals * 3, mask=every % 2 == 0), pa.array(-vals, mask=every % 3 == 0),
         pa.array([["+I", "-U", "+U", "-D"][i % 4] for i in range(n)])],
        names=["count1", "sum", "max", "row_kind"], mask=pa.array(every % 3 == 1))
    layout, keyed = _with_row_state(data, [LogicalType("BIGINT")] * 3, acc, True)
    assert sqlfixed.fixed_layout(layout, keyed.schema, False)
    (tmp_path / "acc").mkdir()
    assert _both(tmp_path / "acc", layout, keyed, data.max_parallelism) == n

    # the same rows under a state TTL (TtlSerializer: the last access, then the row)
    ttl_case = next(d for lb, d in _fixed_operators() if d.layout.states[0].value.kind == "tuple")
    from dataclasses import replace

    ttl_t = ttl_case.layout.states[0].value
    row_t = replace(data.layout.key, logical=(LogicalType("BIGINT"),) * 3, row_kind=True)
    ttl_layout = replace(layout, states=(replace(layout.states[0], value=replace(ttl_t, children=(ttl_t.children[0],
                                                                                                  row_t))),))
    inner = pa.StructArray.from_arrays([acc.field(i) for i in range(4)], names=["count1", "sum", "max", "row_kind"])
    wrapped = pa.StructArray.from_arrays([pa.array(vals * 1000), inner], ["last_access", "value"],
                                         mask=pa.array(every % 3 == 1))
    ttl_keyed = keyed.set_column(2, "acc", wrapped)
    assert sqlfixed.fixed_layout(ttl_layout, ttl_keyed.schema, False)
    (tmp_path / "ttl").mkdir()
    assert _both(tmp_path / "ttl", ttl_layout, ttl_keyed, data.max_parallelism) == n

    # narrow, boolean, float, date and timestamp fields (with NULLs and negative values)
    types = [LogicalType("TINYINT"), LogicalType("SMALLINT"), LogicalType("INTEGER"), LogicalType("BOOLEAN"),
             LogicalType("FLOAT"), LogicalType("DOUBLE"), LogicalType("DATE"),
             LogicalType("TIMESTAMP_WITHOUT_TIME_ZONE", precision=3), LogicalType("NULL")]
    cols = [pa.array(vals % 100, pa.int8()), pa.array(vals * 7, pa.int16()),
            pa.array(vals * 100_003, pa.int32(), mask=every % 5 == 0), pa.array(vals % 2 == 0),
            pa.array(vals / 3, pa.float32()), pa.array(vals / 7, pa.float64(), mask=every % 4 == 0),
            pa.array(vals, pa.int32()).cast(pa.date32()),
            pa.array(vals * 1_000_001, pa.int64()).cast(pa.timestamp("us")), pa.nulls(n)]
    row = pa.StructArray.from_arrays(cols, names=[f"f{i}" for i in range(len(cols))])
    matrix = sqlfixed.fixed_rows(row, types)
    assert matrix is not None and (matrix.reshape(-1) == row_bytes(row, types).data).all()
    layout, keyed = _with_row_state(data, types, row, False)
    assert sqlfixed.fixed_layout(layout, keyed.schema, False)
    (tmp_path / "typed").mkdir()
    assert _both(tmp_path / "typed", layout, keyed, data.max_parallelism) == n


def test_key_groups_of_fixed_keys_equal_the_general_paths():
    label, data = next(iter(_fixed_operators()))
    keys = data.keyed.column("key").combine_chunks()
    kg = key_groups(keys, data.layout.key, data.max_parallelism)
    assert (kg == data.keyed.column("key_group").to_numpy()).all()  # Flink's own key groups


def test_what_it_does_not_write_is_left_to_the_general_path():
    label, data = next(iter(_fixed_operators()))
    string_key = pa.schema([("key_group", pa.int32()), ("key", pa.struct([("k", pa.string())]))]
                           + [(f.name, f.type) for f in data.keyed.schema if f.name not in ("key_group", "key")])
    assert not sqlfixed.fixed_layout(data.layout, string_key, False)
    assert not sqlfixed.fixed_layout(data.layout, data.keyed.schema, True)  # timers
    assert sqlfixed.fixed_rows(pa.array([{"s": "long string"}]), [LogicalType("VARCHAR", length=100)]) is None
    with pytest.raises(StateTypeError, match="NOT NULL"):
        sqlfixed.fixed_rows(pa.array([{"x": None}], pa.struct([("x", pa.int64())])),
                            [LogicalType("BIGINT", nullable=False)])
