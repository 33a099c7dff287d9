"""A real PyFlink 2.3.0 job's savepoint (tests/fixtures/flink/pyflink): key unwrapped, Python states decoded by declared type."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from statekit.errors import CorruptSavepointError, InvalidArgumentError, UntrustedPickleError
from statekit.format.flink.pyflink import parse_type
from statekit.savepoint import Savepoint

FIXTURE = Path(__file__).resolve().parents[2] / "fixtures" / "flink" / "pyflink"
SAVEPOINT = FIXTURE / "savepoint"
# the job's state descriptors (make_pyflink.py), as PyFlink's Types name them
TYPES = {"count": "LONG", "avg": "DOUBLE", "even": "BOOLEAN", "last_kind": "STRING", "small": "INT",
         "raw": "PRIMITIVE_ARRAY(BYTE)", "pair": "TUPLE(STRING, LONG)", "last_row": "ROW(kind STRING, value LONG)",
         "obj": "PICKLED", "recent": "LIST(STRING)", "per_kind": "MAP(STRING, LONG)", "sum": "REDUCING(LONG)"}


def _expected() -> list[dict]:
    return json.loads((FIXTURE / "expected.json").read_text("utf-8"))["operators"]["counter"]["keys"]


def _norm(name, value):
    if name == "per_kind":
        return dict(value)
    if name == "raw":
        return value.hex()
    if name == "pair":
        return [value["f0"], value["f1"]]
    return value


def test_keys_unwrapped_and_every_state_decoded_exactly():
    sp = Savepoint.open(SAVEPOINT, pyflink_types={"counter": TYPES})
    meta = sp.operator("counter")
    assert meta.key_type == "string"
    kinds = {s.name: (s.kind, s.type, s.pickled) for s in meta.keyed_states}
    assert kinds["recent"] == ("list", "array<string>", False) and kinds["per_kind"][0] == "map"
    assert kinds["obj"] == ("value", "binary", True) and kinds["last_row"][1] == "struct<kind:string,value:bigint>"
    rows = {r["key"]: r for r in sp.keyed_table("counter").to_pylist()}
    exp = _expected()
    assert sorted(rows) == sorted(e["key"] for e in exp)
    timers = sp.timers("counter").to_pylist()
    for e in exp:
        r = rows[e["key"]]
        for name in TYPES:
            if name == "obj":
                assert isinstance(r[name], bytes) and r[name][:1] == b"\x80"  # a pickle, not unpickled in tables
                continue
            assert _norm(name, r[name]) == e[name], (e["key"], name)
        assert [t["timestamp"] for t in timers if t["key"] == e["key"]] == e["event_timers"]


def test_get_finds_each_key_in_its_key_group_and_unpickles_only_when_trusted():
    sp = Savepoint.open(SAVEPOINT, pyflink_types={"counter": TYPES}, trust_pickled=True)
    for e in _expected():
        got = sp.get("counter", e["key"])  # reads only the key group of Row(Row(key))
        assert got is not None and got["count"] == e["count"] and got["obj"] == e["obj"]
    assert sp.get("counter", "nobody") is None
    untrusted = Savepoint.open(SAVEPOINT, pyflink_types={"counter": TYPES})
    with pytest.raises(UntrustedPickleError):
        untrusted.get("counter", "alice")


def test_undeclared_states_keep_their_bytes():
    sp = Savepoint.open(SAVEPOINT, pyflink_types={"counter": {"count": "LONG"}})
    row = next(r for r in sp.keyed_table("counter").to_pylist() if r["key"] == "alice")
    assert row["count"] == 8
    assert row["sum"] == [bytes.fromhex("%016x" % next(e["sum"] for e in _expected() if e["key"] == "alice"))]
    plain = Savepoint.open(SAVEPOINT)
    assert plain.operator("counter").key_type == "string"
    assert {s.name for s in plain.operator("counter").keyed_states} == set(TYPES)


def test_wrong_declarations_are_typed_errors():
    with pytest.raises(InvalidArgumentError, match="does not have"):
        Savepoint.open(SAVEPOINT, pyflink_types={"counter": {"nope": "LONG"}})
    with pytest.raises(InvalidArgumentError, match="MAP"):
        Savepoint.open(SAVEPOINT, pyflink_types={"counter": {"count": "MAP(STRING, LONG)"}})
    with pytest.raises(InvalidArgumentError):
        Savepoint.open(SAVEPOINT, pyflink_types={"unknown-op": {"count": "LONG"}})
    sp = Savepoint.open(SAVEPOINT, pyflink_types={"counter": {"recent": "LONG"}})
    with pytest.raises(CorruptSavepointError):
        sp.keyed_table("counter")


@pytest.mark.parametrize("spec,ddl", [
    ("LONG", "bigint"), ("string", "string"), ("PRIMITIVE_ARRAY(BYTE)", "binary"),
    ("ROW(a INT, b LIST_NOT_A_TYPE)", None), ("TUPLE(STRING, DOUBLE)", "struct<f0:string,f1:double>"),
    ("ROW(kind STRING, value LONG)", "struct<kind:string,value:bigint>"), ("LIST(ROW(x INT))", "array<struct<x:int>>"),
    ("MAP(STRING, LONG)", "map<string,bigint>"), ("LIST(LIST(INT))", None), ("LONG)", None),
    ("REDUCING(LONG)", "bigint"), ("AGGREGATING(ROW(n LONG))", "struct<n:bigint>"), ("REDUCING(LIST(INT))", None),
])
def test_parse_type(spec, ddl):
    if ddl is None:
        with pytest.raises(InvalidArgumentError):
            parse_type(spec)
    else:
        assert parse_type(spec).ddl == ddl


def test_thread_mode_savepoint_with_declared_types():
    """Thread mode keeps basic types with Java serializers and tuples/pickles as pickles; the key is still a Row."""
    fixture = FIXTURE.parent / "pyflink-thread"
    types = dict(TYPES, last_row="BYTES")  # a ROW is a pickle of pyflink's Row here: only PyFlink can unpickle it
    types.pop("raw")  # thread mode of PyFlink 2.3.0 cannot checkpoint a PRIMITIVE_ARRAY(BYTE) state
    exp = json.loads((fixture / "expected.json").read_text("utf-8"))["operators"]["counter"]["keys"]
    plain = Savepoint.open(fixture / "savepoint")
    assert plain.operator("counter").key_type == "struct<f0:string>"  # nothing says PyFlink until types are given
    sp = Savepoint.open(fixture / "savepoint", pyflink_types={"counter": types}, trust_pickled=True)
    assert sp.operator("counter").key_type == "string"
    pickled = {s.name for s in sp.operator("counter").keyed_states if s.pickled}
    assert pickled == {"pair", "obj"}
    rows = {r["key"]: r for r in sp.keyed_table("counter").to_pylist()}
    for e in exp:
        for name in ("count", "avg", "even", "last_kind", "small", "recent", "sum"):
            assert rows[e["key"]][name] == e[name], (e["key"], name)
        assert dict(rows[e["key"]]["per_kind"]) == e["per_kind"]
        got = sp.get("counter", e["key"])
        assert list(got["pair"]) == e["pair"] and got["obj"] == e["obj"]


def test_a_converted_pyflink_savepoint_runs_on_in_statekits_runtime(tmp_path):
    """PyFlink state -> statekit savepoint (keys unwrapped, key groups of the plain key) -> the embedded runtime."""
    from statekit.runtime import KeyedProcessFunction, StreamExecutionEnvironment
    from statekit.savepoint.convert import convert_to_statekit
    from statekit.state import ListStateDescriptor, ReducingStateDescriptor, ValueStateDescriptor

    class Counter(KeyedProcessFunction):  # the PyFlink job's function, on statekit's PyFlink-shaped API
        def open(self, rc):
            self.count = rc.get_state(ValueStateDescriptor("count", "bigint"))
            self.sum = rc.get_reducing_state(ReducingStateDescriptor("sum", lambda a, b: a + b, "bigint"))
            self.recent = rc.get_list_state(ListStateDescriptor("recent", "string"))

        def process_element(self, value, ctx):
            key, kind, v = value
            n = (self.count.value() or 0) + 1
            self.count.update(n)
            self.sum.add(v)
            self.recent.update((list(self.recent.get() or []) + [f"{kind}:{v}"])[-3:])
            yield key, n, self.sum.get(), list(self.recent.get())

    out = convert_to_statekit(SAVEPOINT, tmp_path / "sp", uids=["counter"], pyflink_types={"counter": TYPES})
    sp = Savepoint.open(out, trust_pickled=True)
    assert sp.operator("counter").key_type == "string"
    assert sp.get("counter", "alice")["obj"] == next(e["obj"] for e in _expected() if e["key"] == "alice")
    exp = {e["key"]: e for e in _expected()}
    env = StreamExecutionEnvironment(parallelism=2)
    got = (env.from_collection([(k, "view", 7) for k in sorted(exp)]).key_by(lambda e: e[0]).process(Counter())
           .uid("counter").execute_and_collect(restore_from=out, allow_non_restored_state=True, trust_pickled=True))
    assert sorted(got) == sorted((k, e["count"] + 1, e["sum"] + 7, (e["recent"] + ["view:7"])[-3:])
                                 for k, e in exp.items())


def test_a_state_with_ttl_is_refused_by_name_and_the_others_still_decode():
    """`count` has a TTL in this job (Flink wraps each value with its timestamp): a typed error, not wrong values."""
    from statekit.errors import UnsupportedFormatError

    sp_path = FIXTURE.parent / "pyflink-ttl" / "savepoint"
    with pytest.raises(UnsupportedFormatError, match="'count'.*TTL"):
        Savepoint.open(sp_path, pyflink_types={"counter": {"count": "LONG"}})
    others = {k: v for k, v in TYPES.items() if k != "count"}
    sp = Savepoint.open(sp_path, pyflink_types={"counter": others})
    exp = {e["key"]: e for e in _expected()}
    for r in sp.keyed_table("counter").to_pylist():
        assert r["sum"] == exp[r["key"]]["sum"] and r["recent"] == exp[r["key"]]["recent"]
        assert isinstance(r["count"], bytes)  # its stored form
