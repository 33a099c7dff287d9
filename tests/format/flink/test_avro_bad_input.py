"""Damaged Avro state is reported as damaged (naming the part and the fix); Avro statekit does not model is reported unsupported, never damaged."""

from __future__ import annotations

import json
import shutil

import pyarrow as pa
import pytest

from statekit.errors import CorruptSavepointError, StatekitError, UnsupportedFormatError
from statekit.format.flink.avro import parse_schema
from statekit.format.flink.binary import DataInput
from statekit.format.flink.serializers import AVRO_SNAPSHOT, read_versioned
from statekit.format.flink.serializers_out import DataOutput
from statekit.format.flink.values_out import java_string_bytes
from statekit.savepoint import Savepoint

from .test_avro_read import AVRO, UID


@pytest.fixture
def damaged(tmp_path):
    """``damaged(old, new)``: a copy of the HashMap case with bytes `old` replaced by `new` in the state file holding them."""

    def make(old: bytes, new: bytes):
        dst = tmp_path / "sp"
        shutil.copytree(AVRO / "hashmap-canonical" / "savepoint", dst)
        hits = 0
        for p in dst.iterdir():
            p.chmod(0o644)
            data = p.read_bytes()
            if old in data and p.name != "_metadata":
                p.write_bytes(data.replace(old, new, 1))
                hits += 1
        assert hits >= 1
        return dst

    return make


def _snapshot(version: int, cls: str, schema: str) -> bytes:
    out = DataOutput().utf(AVRO_SNAPSHOT).i32(version)
    out.raw(java_string_bytes(cls) + java_string_bytes(schema))
    return bytes(out.buf)


def test_a_truncated_avro_schema_is_damage_named(damaged):
    # the schema's StringValue length (varint of len + 1) made to run past the end of the file
    sp_dir = AVRO / "hashmap-canonical" / "savepoint"
    start = b'{"type":"record","name":"UserKey"'
    blob = next(p.read_bytes() for p in sp_dir.iterdir() if start in p.read_bytes())
    at = blob.index(start)
    assert blob[at - 1] < 0x80 and blob[at - 2] >= 0x80  # a two-byte varint
    bad = damaged(blob[at - 2 : at] + start, b"\xff\x7f" + start)
    with pytest.raises(CorruptSavepointError, match="truncated: the Avro schema.*take a new savepoint"):
        Savepoint.open(bad).keyed_table(UID)


def test_a_truncated_avro_value_is_damage_named(damaged):
    sp = Savepoint.open(damaged(b"\x00\x00\x00\x06city-5", b"\x00\x00\x0f\xffcity-5"))
    with pytest.raises(CorruptSavepointError, match="field 'city' of statekit.avrofix.gen.Address.*needs 4095"):
        sp.keyed_table(UID)


def test_an_avro_schema_statekit_cannot_model_leaves_that_state_raw_and_the_rest_typed(damaged):
    # a decimal wider than 38 digits (same byte length: the file stays consistent)
    sp = Savepoint.open(damaged(b'"precision":12', b'"precision":99'))
    table = sp.keyed_table(UID)
    assert table.schema.field("account").type == pa.binary()
    assert all(isinstance(v, bytes) and v for v in table.column("account").to_pylist())
    assert pa.types.is_list(table.schema.field("events").type)
    reason = sp.stats.states["account"]
    assert "unsupported Avro schema" in reason and "38 digits" in reason


def test_unsupported_schemas_are_named():
    rec = {"type": "record", "name": "Node", "fields": [{"name": "next", "type": ["null", "Node"]}]}
    with pytest.raises(UnsupportedFormatError, match="Node is recursive"):
        parse_schema(json.dumps(rec))
    with pytest.raises(UnsupportedFormatError, match="not JSON"):
        parse_schema("{")
    t = read_versioned(DataInput(_snapshot(3, "x.Node", json.dumps(rec)), "test"), "a value")
    assert t.kind == "binary" and "recursive" in (t.type_class or "")
    with pytest.raises(UnsupportedFormatError, match="version 4 is newer"):
        read_versioned(DataInput(_snapshot(4, "x.Node", json.dumps(rec)), "test"), "a value")
    assert issubclass(UnsupportedFormatError, StatekitError) and not issubclass(UnsupportedFormatError,
                                                                                 CorruptSavepointError)


def test_flink_1x_snapshot_versions_read():
    schema = json.dumps({"type": "record", "name": "R", "namespace": "n", "fields": [{"name": "a", "type": "int"}]})
    v2 = DataOutput().utf(AVRO_SNAPSHOT).i32(2).utf("n.R").utf(schema)
    v1 = DataOutput().utf(AVRO_SNAPSHOT).i32(1).utf(schema)
    for out in (v2, v1):
        t = read_versioned(DataInput(bytes(out.buf), "test"), "a value")
        assert (t.kind, t.type_class, t.ddl()) == ("avro", "n.R", "struct<a:int>")


def test_an_avro_key_statekits_format_cannot_hold_is_refused_naming_the_way_out(tmp_path):
    from statekit.errors import StateTypeError
    from statekit.savepoint.convert import convert_to_statekit
    from statekit.savepoint.flink_out import write_flink

    src = AVRO / "keys-hashmap-canonical" / "savepoint"
    with pytest.raises(StateTypeError, match="operator 'avro-(generic|logical)-key' has keys of type struct<.*"
                                             "write_flink"):
        convert_to_statekit(src, tmp_path / "sk")
    assert not (tmp_path / "sk").exists()
    write_flink(src, tmp_path / "flink", uids={"avro-generic-key": "renamed"})  # the way out works
    assert Savepoint.open(tmp_path / "flink").keyed_table("renamed").num_rows == 10
