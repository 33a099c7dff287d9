"""Avro state written back: byte for byte as Flink wrote it when unchanged, repaired values re-encoded with the same snapshot, Avro keys placed by Avro's own hash."""

from __future__ import annotations

import datetime as dt
import json
from decimal import Decimal
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from statekit.format.flink import avro_out, avro_values
from statekit.format.flink.avro import parse_schema
from statekit.format.flink.binary import DataInput
from statekit.savepoint import Savepoint
from statekit.savepoint.convert import convert_to_statekit
from statekit.savepoint.flink_out import write_flink
from statekit.savepoint.patch import SetValue, repair

from .test_avro_read import AVRO, CASES, COUNT_UIDS, KEY_CASES, UID, expected, jsonish


def _layout(sp):
    return sp.flink.layout(sp.flink_operator(UID))


def test_unchanged_rocksdb_savepoint_is_written_byte_for_byte(tmp_path):
    src = AVRO / "rocksdb-canonical" / "savepoint"
    write_flink(src, tmp_path / "out")
    mine = sorted((p.stat().st_size, p.read_bytes()) for p in (tmp_path / "out").iterdir() if p.name != "_metadata")
    flinks = sorted((p.stat().st_size, p.read_bytes()) for p in src.iterdir() if p.name != "_metadata")
    assert mine == flinks  # RocksDB's canonical order is statekit's: every state file identical


@pytest.mark.parametrize(("case", "uid"), [(c, UID) for c in CASES] + [(c, u) for c in KEY_CASES for u in COUNT_UIDS])
def test_avro_keys_hash_as_flink(case, uid):
    """Avro's record hash equals what the real job's key objects returned: a SpecificRecord of strings, an enum
    and a nullable string; a GenericRecord (raw date/timestamp numbers, ByteBuffer, Fixed, -0.0, float, boolean,
    array, enum, an ignored field); a SpecificRecord holding LocalDate and Instant fields."""
    sp = Savepoint.open(AVRO / case / "savepoint")
    key = sp.flink.layout(sp.flink_operator(uid)).key_type
    want = {json.dumps(e["key"], sort_keys=True): e for e in expected(case)["operators"][uid]["keys"]}
    table = sp.keyed_table(uid, with_key_group=True)
    exp = [want[json.dumps(jsonish(k), sort_keys=True)] for k in table.column("key").to_pylist()]
    assert avro_out.hash_codes(table.column("key"), key.avro, key.type_class).tolist() == \
        [e["key_java_hashcode"] for e in exp]
    assert avro_out.key_groups(table.column("key"), key.avro, key.type_class, 128).tolist() == \
        table.column("key_group").to_pylist() == [e["key_group"] for e in exp]
    assert len(exp) == 10


def test_repaired_value_is_re_encoded_and_the_rest_kept(tmp_path):
    src = AVRO / "hashmap-canonical" / "savepoint"
    e = expected("hashmap-canonical")["operators"][UID]["keys"][2]
    sp = Savepoint.open(src)
    old = sp.get(UID, e["key"])
    new = dict(old["account"], tier="ENTERPRISE", balance=Decimal("-12.34"), nickname="renamed ✓",
               amount={"long": None, "string": "changed"}, tags=[], limits=[("x" * 200, 7)])
    # the user's flow: convert to statekit's format (serializers carried), set the value, convert back
    convert_to_statekit(src, tmp_path / "sk")
    repair(tmp_path / "sk", tmp_path / "fixed", [SetValue(UID, tuple(e["key"].values()), "account", new)])
    write_flink(tmp_path / "fixed", tmp_path / "flink")
    out = Savepoint.open(tmp_path / "flink")
    got = out.get(UID, e["key"])
    assert jsonish(got["account"]) == jsonish(new)
    assert got["events"] == old["events"] and got["by_kind"] == old["by_kind"]
    before = {json.dumps(jsonish(r["key"])): r for r in sp.keyed_table(UID).to_pylist()}
    after = {json.dumps(jsonish(r["key"])): r for r in out.keyed_table(UID).to_pylist()}
    changed = [k for k in before if before[k] != after[k]]
    assert changed == [json.dumps(e["key"])]
    assert _layout(out).key_type.raw == _layout(sp).key_type.raw  # the same snapshot, byte for byte
    assert {s.name: s.serializers["VALUE_SERIALIZER"].raw for s in _layout(out).states} == \
        {s.name: s.serializers["VALUE_SERIALIZER"].raw for s in _layout(sp).states}


def test_max_parallelism_change_places_avro_keys_by_their_hash(tmp_path):
    src = AVRO / "rocksdb-canonical" / "savepoint"
    write_flink(src, tmp_path / "out", max_parallelism=256)
    out = Savepoint.open(tmp_path / "out")
    keys = expected("rocksdb-canonical")["operators"][UID]["keys"]
    from statekit.keygroups import compute_key_groups_for_key_hashes

    want = compute_key_groups_for_key_hashes(np.array([e["key_java_hashcode"] for e in keys], np.int32).view(np.uint32), 256)
    table = out.keyed_table(UID, with_key_group=True)
    got = {json.dumps(jsonish(r["key"]), sort_keys=True): r["key_group"] for r in table.to_pylist()}
    assert [got[json.dumps(e["key"], sort_keys=True)] for e in keys] == want.tolist()
    assert out.get(UID, keys[0]["key"])["account"] is not None


# -- the bulk and per-record decoders and the encoder agree (a drift guard over every Avro kind) --------------
SCHEMA = json.dumps({
    "type": "record", "name": "All", "namespace": "t", "fields": [
        {"name": "i", "type": "int"}, {"name": "l", "type": "long"}, {"name": "f", "type": "float"},
        {"name": "d", "type": "double"}, {"name": "b", "type": "boolean"}, {"name": "s", "type": "string"},
        {"name": "y", "type": "bytes"}, {"name": "x", "type": {"type": "fixed", "name": "F3", "size": 3}},
        {"name": "e", "type": {"type": "enum", "name": "E", "symbols": ["A", "B"]}},
        {"name": "a", "type": {"type": "array", "items": ["null", "string"]}},
        {"name": "m", "type": {"type": "map", "values": {"type": "array", "items": "long"}}},
        {"name": "u", "type": ["null", "int", "string", "E"]},
        {"name": "r", "type": ["null", {"type": "record", "name": "R", "fields": [{"name": "z", "type": "int"}]}]},
        {"name": "dec", "type": {"type": "bytes", "logicalType": "decimal", "precision": 20, "scale": 3}},
        {"name": "decf", "type": {"type": "fixed", "name": "F9", "size": 9, "logicalType": "decimal",
                                  "precision": 20, "scale": 1}},
        {"name": "day", "type": {"type": "int", "logicalType": "date"}},
        {"name": "ms", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {"name": "us", "type": {"type": "long", "logicalType": "local-timestamp-micros"}},
        {"name": "id", "type": {"type": "string", "logicalType": "uuid"}},
    ]})


def _value(n: int) -> dict:
    return {
        "i": -n, "l": n * 10**12, "f": n / 4, "d": n / 3, "b": n % 2 == 0, "s": "ü日" * (n % 3) + str(n),
        "y": bytes(range(n % 7)), "x": bytes([n % 256, 0, 255]), "e": "AB"[n % 2],
        "a": [None if j % 3 == 0 else f"s{j}" for j in range(n % 4 if n % 5 else 130)],
        "m": [(f"k{j}", list(range(j))) for j in range(n % 3)],
        "u": [None, {"int": n, "string": None, "E": None}, {"int": None, "string": "x", "E": None},
              {"int": None, "string": None, "E": "B"}][n % 4],
        "r": None if n % 2 else {"z": n},
        "dec": Decimal(n * 1001 - 5000).scaleb(-3), "decf": Decimal(-n * 10**15 - 1).scaleb(-1),
        "day": dt.date(1970, 1, 1) + dt.timedelta(days=n * 400 - 3000),
        "ms": dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc) + dt.timedelta(milliseconds=n * 1234567),
        "us": dt.datetime(1960, 1, 1) + dt.timedelta(microseconds=n * 987654321), "id": f"00000000-0000-0000-0000-{n:012d}",
    }


def test_bulk_per_record_and_encoder_agree_on_every_avro_kind():
    t = parse_schema(SCHEMA)
    values = [_value(n) for n in range(40)]
    typ = pa.array(values, type=__import__("statekit.types", fromlist=["parse_ddl"]).parse_ddl(t.ddl()))
    encoded = avro_out.encode(typ, t)
    buf = np.frombuffer(b"".join(encoded), np.uint8)
    starts = np.cumsum([0] + [len(b) for b in encoded[:-1]]).astype(np.int64)
    arr, ends = avro_values.bulk(t, buf, starts)
    assert ends.tolist() == (starts + [len(b) for b in encoded]).tolist()
    r = avro_values.reader(t)
    per_record = []
    for s in starts.tolist():
        inp = DataInput(buf.data, "test", pos=s)
        per_record.append(r(inp))
    assert arr.to_pylist() == avro_values.to_arrow(per_record, t).to_pylist() == typ.to_pylist()
    assert avro_out.encode(arr, t) == encoded  # re-encoding what was read gives the same bytes
    col = avro_out.encode_column(arr, t)  # the bulk encoder writes the same bytes
    assert [bytes(col.data[a:b]) for a, b in zip(col.offsets[:-1], col.offsets[1:])] == encoded
    sliced = avro_out.encode_column(arr.slice(7, 20), t)
    assert [bytes(sliced.data[a:b]) for a, b in zip(sliced.offsets[:-1], sliced.offsets[1:])] == encoded[7:27]


def test_delimited_list_bulk_matches_per_record():
    t = parse_schema(SCHEMA)
    typ = pa.array([_value(n) for n in range(9)], type=__import__("statekit.types", fromlist=["parse_ddl"]).parse_ddl(t.ddl()))
    enc = avro_out.encode(typ, t)
    lists = [enc[0:1], enc[1:4], enc[4:9]]
    blobs = [b",".join(x) for x in lists]
    buf = np.frombuffer(b"".join(blobs), np.uint8)
    starts = np.cumsum([0] + [len(b) for b in blobs[:-1]]).astype(np.int64)
    got = avro_values.bulk_delimited(t, buf, starts, np.array([len(b) for b in blobs], np.int64))
    assert got.to_pylist() == [typ.to_pylist()[0:1], typ.to_pylist()[1:4], typ.to_pylist()[4:9]]


def test_generic_record_hash_uses_raw_logical_values():
    t = parse_schema(json.dumps({"type": "record", "name": "K", "fields": [
        {"name": "d", "type": {"type": "int", "logicalType": "date"}},
        {"name": "ts", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {"name": "skip", "type": "string", "order": "ignore"}]}))
    v = {"d": dt.date(1970, 1, 11), "ts": dt.datetime(1970, 1, 1, 0, 0, 1, tzinfo=dt.timezone.utc), "skip": "x"}
    # GenericData.Record: Integer 10 and Long 1000; the ignored field does not count
    assert avro_out.hash_code(v, t, specific=False) == 31 * (31 * 1 + 10) + 1000
    # a SpecificRecord holds LocalDate(1970-01-11) and Instant(1 s): their Java hashCodes
    assert avro_out.hash_code(v, t, specific=True) == 31 * (31 * 1 + ((1970 & 0xFFFFF800) ^ ((1970 << 11) + (1 << 6) + 11))) + 1


def test_map_in_an_avro_key_is_refused_by_name():
    from statekit.errors import UnsupportedFormatError

    t = parse_schema(json.dumps({"type": "record", "name": "K", "fields": [
        {"name": "m", "type": {"type": "map", "values": "int"}}]}))
    with pytest.raises(UnsupportedFormatError, match="field .m."):
        avro_out.hash_code({"m": [("a", 1)]}, t, specific=True)


def test_fixture_paths_exist():
    assert all((AVRO / c / "savepoint" / "_metadata").is_file() for c in CASES + KEY_CASES)
    assert Path(AVRO / "make_avro.sh").is_file()
