"""Writing canonical Flink savepoints: serializer snapshots byte-exact against Flink's, every corpus case written back reads the same, bad input refused with nothing written."""

from __future__ import annotations

import pyarrow as pa
import pytest

from statekit.errors import InvalidArgumentError, ParallelismError, SavepointExistsError, StateTypeError
from statekit.format.flink import serializers_out as S
from statekit.format.flink.binary import DataInput
from statekit.format.flink.reader import FlinkStateReader
from statekit.format.flink.serializers_out import FlinkPojo, FlinkTuple
from statekit.format.flink.values import reader
from statekit.format.flink.values_out import encode
from statekit.savepoint import Savepoint, SavepointBuilder
from statekit.savepoint.flink_out import write_flink
from statekit.state import ListStateDescriptor, MapStateDescriptor, ValueStateDescriptor
from statekit.types import parse_ddl

from .conftest import CANONICAL, savepoint

HINTS = {"v_pojo": FlinkPojo("statekit.flinkreal.Model$ValuePojo", ("label", "total")), "v_tuple": FlinkTuple()}
KEY_HINTS = {"tuple2": FlinkTuple(), "pojo": FlinkPojo("statekit.flinkreal.Model$KeyPojo", ("id", "name"))}


@pytest.mark.parametrize("case", CANONICAL)
def test_snapshots_from_ddl_are_flinks_bytes(case):
    """Every serializer snapshot and meta info of the corpus (Kryo aside) is rebuilt from its DDL type, byte for byte."""
    r = FlinkStateReader(savepoint(case))
    checked = 0
    for op in r.metadata.operators:
        lay = r.layout(op)
        if lay is not None:
            key = S.flink_type(lay.key_type.ddl(), KEY_HINTS.get(case.split("-")[0]))
            assert key.raw == lay.key_type.raw
            for s in lay.states:
                vt = s.value_type
                if not vt.decodable:
                    continue
                if s.keyed_kind == "list":
                    mine = S.list_of(S.flink_type(vt.children[0].ddl()))
                elif s.keyed_kind == "map":
                    mine = S.map_of(S.flink_type(vt.children[0].ddl()), S.flink_type(vt.children[1].ddl()))
                else:
                    mine = S.flink_type(vt.ddl(), HINTS.get(s.name))
                assert mine.raw == vt.raw, s.name
                assert S.keyed_meta_info(s.name, s.keyed_kind, mine) == s.raw, s.name
                checked += 1
            for t in lay.timers:
                assert S.timer_meta_info(t.timer_domain, key) == t.raw
        for name, m in r.operator_states(op).items():
            mode = {"SPLIT_DISTRIBUTE": "split", "UNION": "union", "BROADCAST": "broadcast"}[
                m.options["OPERATOR_STATE_DISTRIBUTION_MODE"]]
            key_t = m.serializers.get("KEY_SERIALIZER")
            key = S.flink_type(key_t.ddl()) if key_t is not None else None
            assert S.operator_meta_info(name, mode, S.flink_type(m.value_type.ddl()), key) == m.raw
            checked += 1
    assert checked


@pytest.mark.parametrize("ddl,values,hint", [
    ("bigint", [0, -1, 2**63 - 1, -(2**63)], None),
    ("string", ["", "a", "日本", "x" * 300, "ü", None], None),
    ("array<string>", [["a", "b"], [], ["c"]], None),
    ("map<string,bigint>", [[("a", 1), ("b", None)], [], [("c", 3)]], None),
    ("struct<kind:string,value:bigint>", [{"kind": "a", "value": 1}, {"kind": None, "value": None}], None),
    ("struct<f0:string,f1:int>", [{"f0": "a", "f1": 1}], FlinkTuple()),
    ("struct<label:string,total:bigint>", [{"label": "a", "total": 1}, {"label": None, "total": 3}],
     FlinkPojo("X", ("label", "total"))),
    ("binary", [b"\x01\x02", b""], None),
    ("double", [1.5, -0.0], None),
    ("float", [2.5], None),
    ("boolean", [True, False], None),
    ("smallint", [-3], None),
    ("tinyint", [7], None),
])
def test_values_encode_to_what_the_reader_decodes(ddl, values, hint):
    t = S.flink_type(ddl, hint)
    enc = encode(pa.array(values, parse_ddl(ddl)), t)
    got = []
    for i in range(len(enc)):
        b = enc.data[enc.offsets[i] : enc.offsets[i + 1]].tobytes()
        inp = DataInput(b, "test")
        got.append(reader(t)(inp))
        assert inp.pos == len(b)
    assert got == values


def _same(a: Savepoint, b: Savepoint) -> None:
    assert [m.uid_hash for m in a.operators] == [m.uid_hash for m in b.operators]
    for m in a.operators:
        mb = b.operator(m.identifier)
        assert (mb.parallelism, mb.max_parallelism, mb.key_type) == (m.parallelism, m.max_parallelism, m.key_type)
        if m.key_type:
            ka = sorted(a.keyed_table(m.identifier, with_key_group=True).to_pylist(), key=repr)
            kb = sorted(b.keyed_table(m.identifier, with_key_group=True).to_pylist(), key=repr)
            assert ka == kb
            assert sorted(a.timers(m.identifier).to_pylist(), key=repr) == sorted(b.timers(m.identifier).to_pylist(), key=repr)
        for s in m.operator_states:
            if s.redistribution == "broadcast":
                assert sorted(a.broadcast_state(m.identifier, s.name).to_pylist(), key=repr) == \
                    sorted(b.broadcast_state(m.identifier, s.name).to_pylist(), key=repr)
            else:
                assert a.operator_state_lists(m.identifier, s.name) == b.operator_state_lists(m.identifier, s.name)


@pytest.mark.parametrize("case", CANONICAL)
def test_corpus_written_back_reads_the_same(case, tmp_path):
    src = savepoint(case)
    before = {p.name: p.read_bytes() for p in src.iterdir()}
    out = write_flink(src, tmp_path / "out")
    _same(Savepoint.open(src), Savepoint.open(out))
    # the carried snapshots are reused byte for byte
    ra, rb = FlinkStateReader(src), FlinkStateReader(out)
    for op in ra.metadata.operators:
        la, lb = ra.layout(op), rb.layout(rb.metadata.operator(op.operator_id))
        if la is not None:
            assert la.key_type.raw == lb.key_type.raw
            assert {s.name: s.raw for s in la.states} == {s.name: s.raw for s in lb.states}
    assert {p.name: p.read_bytes() for p in src.iterdir()} == before  # the source is untouched


def _bootstrap(tmp_path, *, key_type="string", state_type="struct<a:bigint,b:string>") -> str:
    path = tmp_path / "sk"
    with SavepointBuilder(path) as b:
        op = b.add_operator("op", parallelism=2, max_parallelism=128, key_type=key_type,
                            keyed_states=[ValueStateDescriptor("v", state_type)])
        op.write_keyed(pa.table({"key": pa.array(["x", "y"]),
                                 "v": pa.array([{"a": 1, "b": "p"}, {"a": 2, "b": "q"}], parse_ddl(state_type))}))
    return str(path)


def test_pojo_without_field_order_is_refused_and_nothing_is_written(tmp_path):
    src = _bootstrap(tmp_path)
    with pytest.raises(StateTypeError, match="field order"):
        write_flink(src, tmp_path / "out", types={"op": {"v": FlinkPojo("com.example.V")}})
    assert not (tmp_path / "out").exists()
    assert [p.name for p in tmp_path.iterdir()] == ["sk"]  # no staging left behind


def test_type_without_flink_mapping_is_refused(tmp_path):
    path = tmp_path / "sk"
    with SavepointBuilder(path) as b:
        op = b.add_operator("op", parallelism=1, max_parallelism=128, key_type="bigint",
                            keyed_states=[ValueStateDescriptor("when", "timestamp")])
        op.write_keyed(pa.table({"key": [1], "when": pa.array([0], pa.timestamp("us"))}))
    with pytest.raises(StateTypeError, match="no Flink serializer mapping"):
        write_flink(path, tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_existing_target_is_refused(tmp_path):
    src = _bootstrap(tmp_path)
    (tmp_path / "out").mkdir()
    with pytest.raises(SavepointExistsError):
        write_flink(src, tmp_path / "out")


def test_new_state_maps_ddl_to_flink_and_reads_back(tmp_path):
    path = tmp_path / "sk"
    with SavepointBuilder(path) as b:
        op = b.add_operator("op", parallelism=2, max_parallelism=256, key_type="bigint",
                            keyed_states=[ValueStateDescriptor("n", "bigint"), ListStateDescriptor("l", "string"),
                                          MapStateDescriptor("m", "string", "double")])
        op.write_keyed(pa.table({"key": pa.array(range(100), pa.int64()),
                                 "n": pa.array([i if i % 3 else None for i in range(100)], pa.int64()),
                                 "l": pa.array([[str(i)] * (i % 4) for i in range(100)], pa.list_(pa.string())),
                                 "m": pa.array([[("k", float(i))] if i % 2 else None for i in range(100)],
                                               pa.map_(pa.string(), pa.float64()))}))
        op.write_timers(pa.table({"key": pa.array([5, 7], pa.int64()), "timestamp": [1000, 2000],
                                  "domain": ["event", "processing"]}))
    out = write_flink(path, tmp_path / "out")
    a, b = Savepoint.open(path), Savepoint.open(out)
    assert b.format.startswith("flink")
    ta = {r["key"]: r for r in a.keyed_table("op").to_pylist()}
    tb = {r["key"]: r for r in b.keyed_table("op").to_pylist()}
    for k, row in ta.items():
        want = {"n": row["n"], "l": row["l"] or None, "m": row["m"] or None}
        assert {s: tb.get(k, {}).get(s) for s in want} == want
    assert sorted(b.timers("op").select(["key", "timestamp", "domain"]).to_pylist(), key=repr) == \
        sorted(a.timers("op").select(["key", "timestamp", "domain"]).to_pylist(), key=repr)
    assert b.operator("op").max_parallelism == 256


def test_max_parallelism_below_an_operators_parallelism_is_refused(tmp_path):
    with pytest.raises(ParallelismError, match="at least 2"):
        write_flink(savepoint("long-hashmap-canonical"), tmp_path / "out", max_parallelism=1)
    assert not (tmp_path / "out").exists()


def test_rename_remove_and_rekey_on_a_flink_savepoint(tmp_path):
    src = savepoint("long-hashmap-canonical")
    out = write_flink(src, tmp_path / "out", uids={"counter": "counter-v2"}, remove=["types"],
                      max_parallelism={"counter": 256},
                      rekey={"counter": lambda k: f"k{k}"}, key_types={"counter": "string"})
    a, b = Savepoint.open(src), Savepoint.open(out)
    assert "types" not in {m.uid for m in b.operators}
    m = b.operator("counter-v2")
    assert (m.max_parallelism, m.key_type) == (256, "string")
    old = {f"k{r['key']}": r["count"] for r in a.keyed_table("counter").to_pylist()}
    assert {r["key"]: r["count"] for r in b.keyed_table("counter-v2").to_pylist()} == old
    assert b.get("counter-v2", "k-1")["count"] == a.get("counter", -1)["count"]
    with pytest.raises(InvalidArgumentError, match="nope"):
        write_flink(src, tmp_path / "x", uids={"nope": "y"})


def test_convert_to_flink_command_round_trips_through_statekit(tmp_path):
    """Flink -> statekit (`convert`) -> Flink (`convert --to flink`): the snapshots and every value come back."""
    from typer.testing import CliRunner

    from statekit_cli.app import app

    src = savepoint("string-hashmap-canonical")
    runner = CliRunner()
    res = runner.invoke(app, ["convert", str(src), str(tmp_path / "sk"), "--uid", "counter", "--uid", "types",
                              "--uid", "buffer", "--uid", "rules"])
    assert res.exit_code == 0, res.output
    res = runner.invoke(app, ["convert", "--to", "flink", str(tmp_path / "sk"), str(tmp_path / "fl")])
    assert res.exit_code == 0, res.output
    ra, rb = FlinkStateReader(src), FlinkStateReader(tmp_path / "fl")
    for op in ra.metadata.operators:
        la = ra.layout(op)
        if la is not None:
            lb = rb.layout(rb.metadata.operator(op.operator_id))
            assert la.key_type.raw == lb.key_type.raw
            assert {s.name: s.raw for s in la.states} == {s.name: s.raw for s in lb.states}
    a, b = Savepoint.open(src), Savepoint.open(tmp_path / "fl")
    for uid in ("counter", "types"):
        assert sorted(map(repr, a.keyed_table(uid, with_key_group=True).to_pylist())) == \
            sorted(map(repr, b.keyed_table(uid, with_key_group=True).to_pylist()))
    res = runner.invoke(app, ["convert", "--to", "flink", str(tmp_path / "sk"), str(tmp_path / "fl")])
    assert res.exit_code == 2 and "SavepointExistsError" in res.output


def test_max_parallelism_not_matching_the_declared_job_is_refused(tmp_path):
    src = savepoint("long-hashmap-canonical")
    with pytest.raises(ParallelismError, match="declares max parallelism 256"):
        write_flink(src, tmp_path / "out", max_parallelism={"counter": 256}, job_max_parallelism=256)
    assert not (tmp_path / "out").exists() and not list(tmp_path.iterdir())
    out = write_flink(src, tmp_path / "ok", max_parallelism=256, job_max_parallelism=256)
    assert {m.max_parallelism for m in Savepoint.open(out).operators} == {256}


def test_streamed_regular_layout_writes_the_same_bytes_as_the_general_path(tmp_path, monkeypatch):
    """The regular layout (primitive keys and values) is encoded into small reused buffers; with tiny buffers
    (refilled inside key groups) its file is byte-identical to the general encoder's."""
    from statekit.format.flink import regular_out as R
    from statekit.format.flink import writer as W
    from statekit.savepoint.flink_out import operator_data

    keys = pa.array(range(-500, 1500), pa.int64())
    with SavepointBuilder(tmp_path / "sk") as b:
        op = b.add_operator("op", parallelism=1, max_parallelism=256, key_type="bigint",
                            keyed_states=[ValueStateDescriptor("a", "bigint"), ValueStateDescriptor("f", "double"),
                                          ValueStateDescriptor("ok", "boolean")])
        op.write_keyed(pa.table({"key": keys, "a": keys, "f": pa.array([k / 3 for k in range(2000)]),
                                 "ok": pa.array([k % 3 == 0 for k in range(2000)])}))
    sp = Savepoint.open(tmp_path / "sk")
    data = operator_data(sp, sp.operator("op"))
    assert W._all_primitive(data.layout, data.keyed, None)
    monkeypatch.setattr(R, "CHUNK_ROWS", 7)
    streamed = W.write_keyed_file(tmp_path / "streamed", data.layout, data.keyed, None, 0, 255)
    monkeypatch.setattr(W, "_all_primitive", lambda *a: False)
    general = W.write_keyed_file(tmp_path / "general", data.layout, data.keyed, None, 0, 255)
    assert streamed == general
    assert (tmp_path / "streamed").read_bytes() == (tmp_path / "general").read_bytes()


def test_streamed_spark_fragment_matches_the_general_encoder(tmp_path, monkeypatch):
    """A Spark task's fragment of the regular layout, streamed in (tiny) blocks, has the general encoder's
    bytes and runs (called in-process: the encoding is plain Python over Arrow batches)."""
    from statekit.savepoint.flink_out import keyed_layout
    from statekit.spark import flink_columnar as C

    keys = pa.array(range(-300, 700), pa.int64())
    batch = pa.record_batch({"key": keys, "a": pa.array(range(1000), pa.int32()),
                             "f": pa.array([k / 7 for k in range(1000)])})
    from statekit.format.manifest import OperatorMetadata
    from statekit.identifiers import OperatorIdentifier
    from statekit.state.descriptors import StateInfo

    op = OperatorMetadata(identifier=OperatorIdentifier.for_uid("op"), name="op", parallelism=2, max_parallelism=128,
                          key_type="bigint", keyed_states=(StateInfo("a", "value", "int"), StateInfo("f", "value", "double")))
    layout = keyed_layout(op, None, None, max_parallelism=128, has_timers=False)
    out = {}
    for mode in ("streamed", "general"):
        scratch = tmp_path / mode
        scratch.mkdir()
        if mode == "streamed":
            monkeypatch.setattr(C, "PRIMITIVE_BLOCK", 13)
        else:
            monkeypatch.setattr(C, "_primitive", lambda *a: False)
        runs = next(C._fragments(layout, "bigint", str(scratch), "op")(iter([batch]))).to_pylist()
        (frag,) = list(scratch.iterdir())
        out[mode] = (frag.read_bytes(), sorted((r["sid"], r["key_group"], r["start"], r["end"], r["last"], r["count"])
                                               for r in runs))
    assert out["streamed"] == out["general"]
