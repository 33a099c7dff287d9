"""SavepointReader over the acceptance savepoint: every table exactly as written, by uid and by uid hash."""

from __future__ import annotations

import pytest

from statekit.errors import InvalidArgumentError, UnknownOperatorError, UnknownStateError
from statekit.identifiers import OperatorIdentifier
from statekit.savepoint import Savepoint
from statekit.spark import SavepointReader

pytestmark = pytest.mark.spark

KEYS = [1, 2, 3]
PROC_HASH = OperatorIdentifier.for_uid("proc").uid_hash
SRC_HASH = OperatorIdentifier.for_uid("src").uid_hash


def _plain(value):
    """Spark Rows (structs) as dicts, recursively, for comparison with Python data."""
    if hasattr(value, "asDict"):
        return {k: _plain(v) for k, v in value.asDict().items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


def rows(df, order="key"):
    return [_plain(r) for r in df.orderBy(order).collect()]


@pytest.fixture(scope="module")
def reader(spark, acceptance_savepoint):
    return SavepointReader.read(spark, acceptance_savepoint)


@pytest.fixture(params=["uid", "uid_hash", "identifier_hash"])
def op(request):
    """The `proc` operator named three ways; all must read identically."""
    return {
        "uid": "proc",
        "uid_hash": OperatorIdentifier.for_uid_hash(PROC_HASH),
        "identifier_hash": OperatorIdentifier.for_uid("proc"),
    }[request.param]


def test_keyed_state_is_exactly_what_was_written(reader, op, expected_proc_rows):
    df = reader.read_keyed_state(op)
    assert df.columns == ["key", "count", "events", "attrs", "total", "avg"]
    assert rows(df) == expected_proc_rows


def test_keyed_state_types_come_from_the_manifest(reader):
    df = reader.read_keyed_state("proc", with_key_group=True)
    assert df.schema.simpleString() == (
        "struct<key_group:int,key:bigint,count:bigint,events:array<bigint>,attrs:map<string,string>,"
        "total:bigint,avg:struct<count:bigint,sum:bigint>>"
    )
    sp = Savepoint.open(reader.path)
    got = {r["key"]: r["key_group"] for r in df.collect()}
    assert got == {k: sp.keyed_table("proc", with_key_group=True).to_pydict()["key_group"][i]
                   for i, k in enumerate(sp.keyed_table("proc").column("key").to_pylist())}


def test_timers_one_event_and_one_processing_timer_per_key(reader, op):
    got = sorted((r.key, r.timestamp, r.domain) for r in reader.read_timers(op).collect())
    want = sorted([(k, 1000 + k, "event") for k in KEYS] + [(k, 2000 + k, "processing") for k in KEYS])
    assert got == want


def test_operator_list_union_and_broadcast_state(reader):
    for src in ("src", OperatorIdentifier.for_uid_hash(SRC_HASH)):
        assert [r.value for r in reader.read_list_state(src, "buffer").orderBy("subtask", "idx").collect()] == [1, 2, 3]
        union = reader.read_union_state(src, "offsets").orderBy("idx").collect()
        assert [r.value for r in union] == [1, 2, 3]  # one copy, not one per subtask
    broadcast = reader.read_broadcast_state(OperatorIdentifier.for_uid_hash(PROC_HASH), "rules").collect()
    assert {r.key: r.value for r in broadcast} == {1: "1", 2: "2", 3: "3"}


def test_metadata_matches_the_manifest(reader):
    sp = Savepoint.open(reader.path)
    got = {r.operator_uid_hash: r for r in reader.metadata().collect()}
    assert set(got) == {op.uid_hash for op in sp.operators}
    for op in sp.operators:
        row = got[op.uid_hash]
        assert row.checkpoint_id == sp.checkpoint_id == 5
        assert (row.operator_uid, row.operator_name) == (op.uid, op.name)
        assert (row.parallelism, row.max_parallelism) == (op.parallelism, op.max_parallelism)
        assert row.total_size_bytes == sum(f.bytes for f in op.files)
        assert row.key_type == op.key_type
        keyed = [(s.name, s.kind, s.type) for s in op.keyed_states]
        assert [(s.name, s.kind, s.type) for s in row.states][: len(keyed)] == keyed
    assert got[PROC_HASH].subtask_state_count == 4
    assert [s.kind for s in got[SRC_HASH].states] == ["split", "union"]


def test_register_then_sql_join_across_two_operators(spark, reader):
    databases = reader.register("acc")
    assert databases["acc_proc"] == ["keyed", "timers", "rules"]
    assert databases["acc_src"] == ["buffer", "offsets"]
    joined = spark.sql(
        "SELECT p.key, p.count, e.label FROM acc_proc.keyed p JOIN acc_enrich.keyed e ON p.key = e.key ORDER BY p.key"
    ).collect()
    assert [(r["key"], r["count"], r["label"]) for r in joined] == [(k, 10 * k, f"label-{k}") for k in KEYS]
    pending = spark.sql("SELECT count(*) AS n FROM acc_proc.timers WHERE domain = 'event'").collect()[0].n
    assert pending == 3


def test_data_source_from_sql(spark, acceptance_savepoint):
    spark.sql(
        f"CREATE OR REPLACE TEMPORARY VIEW acc_raw USING statekit "
        f"OPTIONS (path '{acceptance_savepoint}', uid 'proc', table 'keyed')"
    )
    spark.sql("CREATE OR REPLACE TEMPORARY VIEW acc_keyed AS SELECT * FROM acc_raw WHERE key IS NOT NULL")
    assert spark.sql("SELECT count FROM acc_keyed WHERE key = 2").collect()[0][0] == 20
    # The unfiltered query after a filtered one must see every key (see the PySpark 4.1 caveat).
    assert spark.sql("SELECT count(*) FROM acc_keyed").collect()[0][0] == 3
    meta = spark.read.format("statekit-metadata").load(str(acceptance_savepoint))
    assert meta.count() == 3


def test_reused_dataframe_is_not_pruned_by_an_earlier_query(reader):
    df = reader.read_keyed_state("proc")
    assert df.where("key = 1").count() == 1
    assert df.count() == 3
    assert df.where("key IN (1, 3)").count() == 2
    assert df.select("count").count() == 3


def test_unknown_operator_or_state_lists_what_exists(reader):
    with pytest.raises(UnknownOperatorError, match="proc"):
        reader.read_keyed_state("nope")
    with pytest.raises(UnknownStateError, match="buffer"):
        reader.read_list_state("src", "nope")
    with pytest.raises(UnknownStateError):
        reader.read_union_state("src", "buffer")  # a split list, not a union list
    with pytest.raises(InvalidArgumentError, match="no keyed state"):
        reader.read_keyed_state("src")


def test_parquet_engine_reads_the_same_rows(reader, expected_proc_rows):
    df = reader.read_keyed_state("proc", engine="parquet")
    assert df.schema == reader.read_keyed_state("proc").schema
    assert rows(df) == expected_proc_rows


def test_registered_keyed_table_is_the_savepoint_itself_pruned_and_verified(spark, acceptance_savepoint, tmp_path):
    import shutil

    from statekit.errors import ChecksumMismatchError
    from statekit.savepoint import Savepoint, check

    copy = tmp_path / "sp"
    shutil.copytree(acceptance_savepoint, copy)
    reader = SavepointReader.read(spark, copy)
    reader.register("inplace")
    reader.register("inplace")  # again: replaces the tables, never touches the savepoint
    assert check(copy).ok
    files = Savepoint.open(copy).keyed_files("proc")
    folder = (copy / files[0].path).parent
    (folder / "stray.parquet").write_bytes((copy / files[0].path).read_bytes())  # not in the manifest
    table = spark.table("inplace_proc.keyed")
    assert table.columns == ["key", "count", "events", "attrs", "total", "avg"]
    assert sorted(r.key for r in table.collect()) == KEYS  # the stray copy is not read
    lookup = spark.sql("SELECT count FROM inplace_proc.keyed WHERE key = 2")
    assert [r[0] for r in lookup.collect()] == [20]
    assert all(str(copy.resolve()) in f for f in lookup.inputFiles()) and len(lookup.inputFiles()) == 1
    for f in files:
        data = bytearray((copy / f.path).read_bytes())
        data[len(data) // 2] ^= 0xFF
        (copy / f.path).write_bytes(bytes(data))
    with pytest.raises(ChecksumMismatchError):
        spark.sql("SELECT sum(count) FROM inplace_proc.keyed").collect()
