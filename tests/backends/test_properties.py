"""Hypothesis: random operations on every backend behave like a dict model, and survive snapshot → restore."""

from __future__ import annotations

import pyarrow as pa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from statekit.keygroups import KeyGroupRange, assign_to_key_group, key_group_range
from statekit.state import ListStateDescriptor, MapStateDescriptor, ValueStateDescriptor

VALUE = ValueStateDescriptor("v", "bigint")
LIST = ListStateDescriptor("l", "string")
MAP = MapStateDescriptor("m", "int", "double")

keys = st.sampled_from(["a", "b", "ü", "", "key\x00nul", "long" * 20])
namespaces = st.sampled_from([None, None, (0, 10), (-5, 5)])
ops = st.one_of(
    st.tuples(st.just("set"), st.integers(-(2**63), 2**63 - 1)),
    st.tuples(st.just("clear_v"), st.none()),
    st.tuples(st.just("add"), st.text(max_size=5)),
    st.tuples(st.just("add_all"), st.lists(st.text(max_size=3), max_size=3)),
    st.tuples(st.just("update_l"), st.lists(st.text(max_size=3), max_size=2)),
    st.tuples(st.just("put"), st.tuples(st.integers(-3, 3), st.floats(allow_nan=False))),
    st.tuples(st.just("remove"), st.integers(-3, 3)),
    st.tuples(st.just("clear_m"), st.none()),
    st.tuples(st.just("snapshot"), st.none()),
)
programs = st.lists(st.tuples(keys, namespaces, ops), max_size=40)


def scope(backend, key, ns):
    backend.set_current_key(key, assign_to_key_group(key, 128, pa.string()))
    backend.set_current_namespace(ns)


def apply(backend, handles, model, key, ns, op, arg):
    v, lst, m = handles
    slot = (key, ns)
    scope(backend, key, ns)
    if op == "set":
        v.update(arg)
        model["v"][slot] = arg
    elif op == "clear_v":
        v.clear()
        model["v"].pop(slot, None)
    elif op == "add":
        lst.add(arg)
        model["l"].setdefault(slot, []).append(arg)
    elif op == "add_all":
        lst.add_all(arg)
        if arg:
            model["l"].setdefault(slot, []).extend(arg)
    elif op == "update_l":
        lst.update(arg)
        if arg:
            model["l"][slot] = list(arg)
        else:
            model["l"].pop(slot, None)
    elif op == "put":
        m.put(*arg)
        model["m"].setdefault(slot, {})[arg[0]] = arg[1]
    elif op == "remove":
        m.remove(arg)
        model["m"].get(slot, {}).pop(arg, None)
        if slot in model["m"] and not model["m"][slot]:
            del model["m"][slot]
    elif op == "clear_m":
        m.clear()
        model["m"].pop(slot, None)
    elif op == "snapshot":
        backend.snapshot(1)  # a snapshot never materialised must not disturb anything


def check(backend, handles, model):
    v, lst, m = handles
    slots = {s for d in model.values() for s in d} | {("a", None)}
    for key, ns in slots:
        scope(backend, key, ns)
        assert v.value() == model["v"].get((key, ns))
        assert lst.get() == model["l"].get((key, ns), [])
        assert dict(m.items()) == model["m"].get((key, ns), {})
    for name in ("v", "l", "m"):
        assert sorted(backend.namespaces(name), key=repr) == sorted(model[name], key=repr)


def table_model(table: pa.Table) -> dict:
    out: dict = {"v": {}, "l": {}, "m": {}}
    for row in table.to_pylist():
        ns = row.get("namespace")
        slot = (row["key"], None if ns is None else (ns["start"], ns["end"]))
        for name in out:
            if row.get(name) is not None:
                out[name][slot] = dict(row[name]) if name == "m" else row[name]
    return out


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(program=programs)
def test_random_ops_match_a_dict_model(make_backend, program):
    backend = make_backend()
    handles = [backend.get_state(d) for d in (VALUE, LIST, MAP)]
    model: dict = {"v": {}, "l": {}, "m": {}}
    for key, ns, (op, arg) in program:
        apply(backend, handles, model, key, ns, op, arg)
    check(backend, handles, model)
    snap = backend.snapshot(2)
    table = snap.table()
    assert table_model(table) == model
    # restore at parallelism 2: every row lands in exactly one subtask, and nothing changes
    parts = []
    for i in range(2):
        sub = make_backend(key_group_range=key_group_range(128, 2, i))
        sub.restore([table], snap.infos)
        sub_handles = [sub.get_state(d) for d in (VALUE, LIST, MAP)]
        parts.append(sub.snapshot(3).table())
        r = sub.key_group_range
        sub_model = {
            name: {s: x for s, x in d.items() if assign_to_key_group(s[0], 128, pa.string()) in r}
            for name, d in model.items()
        }
        check(sub, sub_handles, sub_model)
        sub.close()
    assert sum(p.num_rows for p in parts) == table.num_rows
    merged = table_model(pa.concat_tables(parts))
    assert merged == model


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(values=st.lists(st.tuples(st.integers(-(2**31), 2**31 - 1), st.integers(-(2**63), 2**63 - 1)), max_size=30))
def test_int_keys_restore_column_wise(make_backend, values):
    a = make_backend(key_type=pa.int32())
    h = a.get_state(VALUE)
    model = {}
    for k, x in values:
        a.set_current_key(k, assign_to_key_group(k, 128, pa.int32()))
        h.update(x)
        model[k] = x
    table = a.snapshot(1).table()
    b = make_backend(key_type=pa.int32(), key_group_range=KeyGroupRange(0, 127))
    b.restore([table], a.state_infos())
    h = b.get_state(VALUE)
    for k, x in model.items():
        b.set_current_key(k, assign_to_key_group(k, 128, pa.int32()))
        assert h.value() == x
    assert table_model(b.snapshot(2).table())["v"] == {(k, None): x for k, x in model.items()}
