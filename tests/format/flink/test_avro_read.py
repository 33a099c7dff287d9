"""Avro state of a real Flink 2.3.0 job (flink-avro: SpecificRecord key and value, GenericRecord list and map values) reads exactly its expected.json."""

from __future__ import annotations

import datetime as dt
import json
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from statekit.format.flink.avro import parse_schema
from statekit.savepoint import Savepoint
from statekit.savepoint.flink import FlinkSavepoint

AVRO = Path(__file__).resolve().parents[2] / "fixtures" / "flink" / "avro"
CASES = ["hashmap-canonical", "rocksdb-canonical"]
UID = "avro-state"
#: the keys-* cases: count operators keyed by a GenericRecord and by a SpecificRecord with LocalDate/Instant fields
KEY_CASES = ["keys-hashmap-canonical", "keys-rocksdb-canonical"]
COUNT_UIDS = ("avro-generic-key", "avro-logical-key")
EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)


def expected(case: str) -> dict:
    return json.loads((AVRO / case / "expected.json").read_text())


def jsonish(v: Any) -> Any:
    """A value read by statekit in the JSON form of the generator's `AvroModel.json`."""
    if isinstance(v, dict):
        return {k: jsonish(x) for k, x in v.items()}
    if isinstance(v, list):
        if v and isinstance(v[0], tuple):  # an Arrow map
            return {k: jsonish(x) for k, x in v}
        return [jsonish(x) for x in v]
    if isinstance(v, Decimal):
        return format(v, "f")
    if isinstance(v, dt.datetime):
        d = v - EPOCH
        return (d.days * 86400 + d.seconds) * 1_000_000 + d.microseconds
    if isinstance(v, dt.date):
        return v.isoformat()
    if isinstance(v, bytes):
        return v.hex()
    return v


@pytest.mark.parametrize("case", CASES)
def test_avro_case_reads_exactly(case):
    exp = expected(case)["operators"][UID]
    sp = Savepoint.open(AVRO / case / "savepoint")
    assert isinstance(sp, FlinkSavepoint)
    table = sp.keyed_table(UID, with_key_group=True)
    rows = {json.dumps(jsonish(r["key"]), sort_keys=True): r for r in table.to_pylist()}
    assert len(rows) == len(exp["keys"]) == table.num_rows
    for e in exp["keys"]:
        r = rows[json.dumps(e["key"], sort_keys=True)]
        assert r["key_group"] == e["key_group"]
        for name in ("account", "events", "by_kind"):
            assert jsonish(r[name]) == e[name], (e["key"], name)
    # every column typed, none left as raw bytes; regular layouts decoded in bulk
    s = table.schema
    acct = s.field("account").type
    assert acct.field("balance").type == pa.decimal128(12, 2)
    assert acct.field("opened").type == pa.date32()
    assert acct.field("last_seen").type == pa.timestamp("us", tz="UTC")
    assert acct.field("tier").type == pa.string() and acct.field("checksum").type == pa.binary()
    assert acct.field("limits").type == pa.map_(pa.string(), pa.int64())
    assert acct.field("amount").type == pa.struct([("long", pa.int64()), ("string", pa.string())])
    assert s.field("key").type.field("region").type == pa.string()
    assert s.field("events").type.value_type.field("meta").type.field("flags").type == pa.list_(pa.bool_())
    assert all(v == "bulk" for v in sp.stats.states.values()), sp.stats.states


@pytest.mark.parametrize("case", KEY_CASES)
def test_avro_keyed_counts_read_exactly(case):
    sp = Savepoint.open(AVRO / case / "savepoint")
    for uid in COUNT_UIDS:
        keys = expected(case)["operators"][uid]["keys"]
        rows = {json.dumps(jsonish(r["key"]), sort_keys=True): r
                for r in sp.keyed_table(uid, with_key_group=True).to_pylist()}
        assert len(rows) == len(keys)
        for e in keys:
            r = rows[json.dumps(e["key"], sort_keys=True)]
            assert (r["key_group"], r["count"]) == (e["key_group"], e["count"]), (uid, e["key"])


@pytest.mark.parametrize("case", CASES)
def test_avro_schema_and_serializer_named(case):
    sp = Savepoint.open(AVRO / case / "savepoint")
    meta = sp.operator(UID)
    assert meta.key_type == "struct<user:string,shard:int,region:string,tag:string>"
    types = {s.name: s.type for s in meta.keyed_states}
    assert types["by_kind"].startswith("map<string,struct<kind:string,value:bigint,at:timestamp,")
    assert types["events"].startswith("array<struct<kind:string")
    lay = sp.flink.layout(sp.flink_operator(UID))
    assert lay.key_type.kind == "avro" and lay.key_type.type_class == "statekit.avrofix.gen.UserKey"
    assert [f.name for f in lay.key_type.avro.fields] == ["user", "shard", "region", "tag"]
    assert lay.key_type.avro.fields[2].type == parse_schema(
        '{"type": "enum", "name": "Region", "namespace": "statekit.avrofix.gen", "symbols": ["EU", "US", "APAC"]}')


def test_avro_one_key_get():
    exp = expected("rocksdb-canonical")["operators"][UID]["keys"][3]
    sp = Savepoint.open(AVRO / "rocksdb-canonical" / "savepoint")
    got = sp.get(UID, exp["key"])
    assert got is not None and jsonish(got["account"]) == exp["account"]
