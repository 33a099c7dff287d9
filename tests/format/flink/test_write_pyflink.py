"""Writing PyFlink state (tests/fixtures/flink/pyflink): Row-wrapped keys, PyFlink coder bytes and serializers byte-equal
to the real job's, whether carried, declared or inferred from DDL columns; bad input refused with nothing written.
(That a real PyFlink job restores what is written: tests/flink/test_pyflink_restore.py.)"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

from statekit.errors import InvalidArgumentError, StateTypeError
from statekit.format.flink import pyflink_out
from statekit.format.flink.reader import FlinkStateReader
from statekit.savepoint import Savepoint, SavepointBuilder
from statekit.savepoint.convert import convert_to_statekit
from statekit.savepoint.flink_out import write_flink
from statekit.state.descriptors import StateInfo

SAVEPOINT = Path(__file__).resolve().parents[2] / "fixtures" / "flink" / "pyflink" / "savepoint"
TYPES = {"count": "LONG", "avg": "DOUBLE", "even": "BOOLEAN", "last_kind": "STRING", "small": "INT",
         "raw": "PRIMITIVE_ARRAY(BYTE)", "pair": "TUPLE(STRING, LONG)", "last_row": "ROW(kind STRING, value LONG)",
         "obj": "PICKLED", "recent": "LIST(STRING)", "per_kind": "MAP(STRING, LONG)", "sum": "REDUCING(LONG)"}
STRUCTS = {"pair": TYPES["pair"], "last_row": TYPES["last_row"]}


def _stored(path: Path) -> pa.Table:
    """The counter's keyed table as stored: key groups, keys and coder bytes (no types declared)."""
    return Savepoint.open(path).keyed_table("counter", with_key_group=True).sort_by("key")


def _layout(path: Path):
    r = FlinkStateReader(path)
    op = next(o for o in r.metadata.operators if r.layout(o) is not None)
    return r.layout(op)


@pytest.mark.parametrize("route", ["stored", "declared", "statekit-stored", "statekit-declared"])
def test_pyflink_savepoint_written_back_is_byte_identical(route, tmp_path):
    """Read (with or without types, directly or through statekit's format) and written back: the same bytes."""
    if route == "stored":
        source = Savepoint.open(SAVEPOINT)
    elif route == "declared":
        source = Savepoint.open(SAVEPOINT, pyflink_types={"counter": TYPES})
    else:
        types = {"counter": TYPES} if route == "statekit-declared" else None
        source = Savepoint.open(convert_to_statekit(SAVEPOINT, tmp_path / "sk", pyflink_types=types))
    out = write_flink(source, tmp_path / "out", pyflink={"counter": STRUCTS} if route == "statekit-declared" else None)
    assert _stored(out).equals(_stored(SAVEPOINT))
    want, got = _layout(SAVEPOINT), _layout(out)
    assert got.key_type.raw == want.key_type.raw
    assert {s.name: s.raw for s in got.states} == {s.name: s.raw for s in want.states}
    assert Savepoint.open(out).timers("counter").sort_by("key").equals(Savepoint.open(SAVEPOINT).timers("counter").sort_by("key"))


def test_bootstrapped_columns_are_coded_as_the_pyflink_job_stores_them(tmp_path):
    """Plain DDL columns + the two types DDL cannot tell (TUPLE, PICKLED) give the job's serializers and bytes."""
    decoded = Savepoint.open(SAVEPOINT, pyflink_types={"counter": TYPES}, trust_pickled=False)
    meta = decoded.operator("counter")
    table = decoded.keyed_table("counter")
    with SavepointBuilder(tmp_path / "sk") as b:
        op = b.add_operator("counter", max_parallelism=128, key_type="string",
                            keyed_states=[StateInfo(s.name, s.kind, s.type) for s in meta.keyed_states])
        op.write_keyed(table)
        op.write_timers(decoded.timers("counter").drop_columns(["key_group"]))
    out = write_flink(tmp_path / "sk", tmp_path / "out", pyflink={"counter": {"pair": TYPES["pair"], "obj": "PICKLED"}})
    assert _stored(out).equals(_stored(SAVEPOINT))  # key groups of Row(Row(key)) included
    want, got = _layout(SAVEPOINT), _layout(out)
    assert got.key_type.raw == want.key_type.raw
    assert {s.name: s.raw for s in got.states} == {s.name: s.raw for s in want.states}
    assert sorted(t.raw for t in got.timers) == sorted(t.raw for t in want.timers)


def test_key_groups_are_those_of_the_row_wrapped_key():
    stored = _stored(SAVEPOINT)
    kg = pyflink_out.key_groups(stored.column("key"), "string", 128)
    assert kg.tolist() == stored.column("key_group").to_pylist()
    from statekit.keygroups import assign_key_groups

    assert kg.tolist() != assign_key_groups(stored.column("key"), 128, "string").tolist()  # not the plain key's


def test_bad_pyflink_input_is_refused_and_nothing_is_written(tmp_path):
    with SavepointBuilder(tmp_path / "sk") as b:
        op = b.add_operator("counter", max_parallelism=128, key_type="bigint",
                            keyed_states=[StateInfo("nested", "value", "array<bigint>"), StateInfo("n", "value", "bigint")])
        op.write_keyed(pa.table({"key": pa.array([1], pa.int64()), "nested": [[1, 2]], "n": pa.array([3], pa.int64())}))
    with pytest.raises(StateTypeError, match="no PyFlink coder"):
        write_flink(tmp_path / "sk", tmp_path / "a", pyflink={"counter": {}})
    with pytest.raises(StateTypeError, match="is a value state but is declared"):
        write_flink(tmp_path / "sk", tmp_path / "b", pyflink={"counter": {"nested": "LIST(LONG)"}})
    with pytest.raises(StateTypeError, match="cannot code"):
        write_flink(tmp_path / "sk", tmp_path / "b2", pyflink={"counter": {"nested": "LONG"}})
    with pytest.raises(InvalidArgumentError, match="does not have"):
        write_flink(tmp_path / "sk", tmp_path / "c", pyflink={"counter": {"nested": "LONG", "other": "LONG"}})
    sk2 = convert_to_statekit(SAVEPOINT, tmp_path / "sk2", pyflink_types={"counter": TYPES})
    with pytest.raises(StateTypeError, match="ROW or a TUPLE"):
        write_flink(sk2, tmp_path / "d")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["sk", "sk2"]
