"""Repairs of a Flink savepoint carry every operator's state: nothing is silently left behind.

A repair reads a Flink savepoint and writes a statekit savepoint; the operators it does not change
are carried over decoded (their state is not in statekit files that could be linked).
"""

from __future__ import annotations

import pytest

from statekit.savepoint import Savepoint
from statekit.savepoint.patch import DeleteKeys, RenameOperator, repair
from statekit.savepoint.transforms import change_operator_identifier, remove_operator
from statekit.testing import tree_digest

from .conftest import savepoint

CASE = "string-hashmap-canonical"


def _rows(sp, op):
    t = sp.keyed_table(op)
    t = t.drop_columns([c for c in ("key_group",) if c in t.column_names])
    return sorted(t.to_pylist(), key=lambda r: r["key"])


def _plain(x):
    """A table or list as plain Python values, so schema metadata does not count."""
    if hasattr(x, "to_pylist"):
        return sorted(x.to_pylist(), key=repr)
    if isinstance(x, (list, tuple)):
        return [_plain(v) for v in x]
    return x


def _carried_unchanged(src, out, *, renamed=None):
    """Every stateful operator of `src` is in `out` with the same keyed rows, timers and operator state."""
    for m in src.operators:
        op = m.identifier
        target_op = renamed.get(m.uid, m.uid) if renamed else m.uid
        if m.key_type is not None:
            assert _rows(out, target_op) == _rows(src, op), m.uid
            assert out.timers(target_op).num_rows == src.timers(op).num_rows, m.uid
        for info in m.operator_states:
            if info.redistribution == "broadcast":
                assert _plain(out.broadcast_state(target_op, info.name)) == _plain(src.broadcast_state(op, info.name))
            else:
                assert _plain(out.operator_state_lists(target_op, info.name)) == _plain(src.operator_state_lists(op, info.name))


def test_rename_uid_of_a_flink_savepoint_keeps_every_operators_state(tmp_path):
    source = savepoint(CASE)
    before = tree_digest(source)
    change_operator_identifier(source, tmp_path / "out", "counter", "counter2")
    src, out = Savepoint.open(source), Savepoint.open(tmp_path / "out")
    assert out.keyed_table("counter2").num_rows == src.keyed_table("counter").num_rows > 0
    _carried_unchanged(src, out, renamed={"counter": "counter2"})
    assert tree_digest(source) == before


def test_remove_operator_of_a_flink_savepoint_keeps_the_others(tmp_path):
    source = savepoint(CASE)
    remove_operator(source, tmp_path / "out", "types")
    src, out = Savepoint.open(source), Savepoint.open(tmp_path / "out")
    assert "types" not in {m.uid for m in out.operators}
    assert _rows(out, "counter") == _rows(src, "counter")
    assert _plain(out.broadcast_state("rules", "rules")) == _plain(src.broadcast_state("rules", "rules"))


def test_patch_repair_of_a_flink_savepoint_keeps_unedited_operators(tmp_path):
    source = savepoint(CASE)
    src = Savepoint.open(source)
    victim = _rows(src, "counter")[0]["key"]
    repair(source, tmp_path / "out", [DeleteKeys("counter", (victim,)), RenameOperator("rules", "rules2")])
    out = Savepoint.open(tmp_path / "out")
    assert [r["key"] for r in _rows(out, "counter")] == [r["key"] for r in _rows(src, "counter") if r["key"] != victim]
    assert _rows(out, "types") == _rows(src, "types")
    assert _plain(out.broadcast_state("rules2", "rules")) == _plain(src.broadcast_state("rules", "rules"))
    assert _plain(out.operator_state_lists("buffer", "buffered")) == _plain(src.operator_state_lists("buffer", "buffered"))


@pytest.mark.parametrize("repair_fn", ["rename", "remove"])
def test_repairs_of_flink_savepoints_check_clean(tmp_path, repair_fn):
    from statekit.savepoint import check

    if repair_fn == "rename":
        change_operator_identifier(savepoint(CASE), tmp_path / "out", "buffer", "buffer2")
    else:
        remove_operator(savepoint(CASE), tmp_path / "out", "counter")
    assert check(tmp_path / "out").ok
