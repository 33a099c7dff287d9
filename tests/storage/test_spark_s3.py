"""Spark on savepoints on a real S3 server: corpus Flink savepoints and a statekit savepoint read exactly as from
local disk through `SavepointReader` (each task opens the store itself; the storage options never show in a plan),
`USING statekit` in SQL, `register()`, and `SavepointWriter` writes and conversions to the server read back.

`make test` runs a representative handful of corpus cases (HashMap and RocksDB, canonical and native, operator
states, one per Flink line of the fast set); every case of every version runs under the `extended` marker.
"""

from __future__ import annotations

import contextlib
import io
import re

import pyarrow as pa
import pytest

from statekit.errors import InvalidArgumentError, StorageAccessError
from statekit.keygroups import assign_to_key_group
from statekit.savepoint import Savepoint
from statekit.savepoint.flink import FlinkSavepoint
from statekit.spark import SavepointReader, SavepointWriter

from ..format.flink.conftest import VERSION_CASES, expected, savepoint
from ..format.flink.test_corpus import FLINK_34063
from ..format.flink.test_spark_versions import _check_keyed, _check_operator_state
from .test_read_s3 import _statekit_savepoint

pytestmark = pytest.mark.spark

#: one case per kind of state layout (and per Flink line of the fast set) for `make test`
REPRESENTATIVE = {("2.3.0", "long-hashmap-canonical"), ("2.3.0", "string-rocksdb-native"),
                  ("1.20.5", "long-rocksdb-canonical")}
CASES = [pytest.param(v, c, marks=() if (v, c) in REPRESENTATIVE else pytest.mark.extended) for v, c in VERSION_CASES]


def test_representative_cases_exist():
    """A renamed corpus case must not drop out of `make test` silently."""
    assert REPRESENTATIVE <= set(VERSION_CASES), REPRESENTATIVE - set(VERSION_CASES)


def _plan_text(*frames) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        for df in frames:
            df.explain("extended")
            df.explain("formatted")
    return out.getvalue()


def _rows(df, *order):
    return [r.asDict(recursive=True) for r in df.orderBy(*order).collect()]


@pytest.mark.parametrize("version,case", CASES)
def test_corpus_savepoint_on_s3_reads_exactly_through_spark(spark, s3_server, version, case):
    """Every table of the case, read by Spark tasks straight from the server, is the case's expected.json."""
    uri = s3_server.upload_dir(savepoint(case, version), f"spark-corpus/{version}/{case}")
    reader = SavepointReader.read(spark, uri, storage_options=s3_server.options())
    assert reader.path == uri
    refused = 0
    for uid, op in expected(case, version)["operators"].items():
        if op["kind"] == "keyed":
            _check_keyed(reader, uid, op)
        elif op["kind"] == "operator":
            for name, st in op["operator_states"].items():
                try:
                    _check_operator_state(reader, uid, name, st)
                except Exception as exc:  # only FLINK-34063's refusal is expected, as from local disk
                    if (version, case) not in FLINK_34063 or "FLINK-34063" not in str(exc):
                        raise
                    refused += 1
    assert (refused > 0) == ((version, case) in FLINK_34063)


@pytest.fixture(scope="module")
def statekit_on_s3(s3_server, tmp_path_factory):
    local = _statekit_savepoint(tmp_path_factory.mktemp("sk") / "sp")
    return local, s3_server.upload_dir(local, "spark-statekit/sp")


def test_statekit_savepoint_on_s3_reads_as_from_disk_through_spark(spark, s3_server, statekit_on_s3):
    local, uri = statekit_on_s3
    opts = s3_server.options()
    remote = SavepointReader.read(spark, uri, storage_options=opts)
    here = SavepointReader.read(spark, str(local))
    for a, b in ((remote.read_keyed_state("counter", with_key_group=True), here.read_keyed_state("counter", with_key_group=True)),
                 (remote.read_timers("counter"), here.read_timers("counter"))):
        assert a.schema == b.schema
        assert _rows(a, "key") == _rows(b, "key")
    assert _rows(remote.read_keyed_state("counter").where("key = 5"), "key") == [
        {"key": 5, "count": 5, "seen": ["5"]}]
    assert _rows(remote.metadata(), "operator_uid_hash") == _rows(here.metadata(), "operator_uid_hash")
    # Spark's own Parquet reader (statekit's rule verifies files on local disk): tasks read remote files themselves
    with pytest.raises(InvalidArgumentError, match="engine='statekit'"):
        remote.read_keyed_state("counter", engine="parquet")
    text = _plan_text(remote.read_keyed_state("counter"), remote.metadata(), remote.read_timers("counter"))
    assert opts["secret_key"] not in text and opts["access_key"] not in text
    assert opts["secret_key"] not in repr(remote) + repr(remote.savepoint.path)


def test_storage_options_in_sql_and_register(spark, s3_server, statekit_on_s3):
    """``USING statekit`` takes ``storage.*`` options; `register()` copies remote tables into the warehouse."""
    local, uri = statekit_on_s3
    opts = s3_server.options()
    storage = ", ".join(f"`storage.{k}` '{v}'" for k, v in opts.items())
    spark.sql(f"CREATE OR REPLACE TEMPORARY VIEW sk_s3_raw USING statekit OPTIONS (path '{uri}', uid 'counter', "
              f"table 'keyed', {storage})")
    got = spark.sql("SELECT key, count FROM sk_s3_raw WHERE key IS NOT NULL AND key < 3 ORDER BY key").collect()
    assert [(r.key, r["count"]) for r in got] == [(0, 0), (1, 1), (2, 2)]
    text = _plan_text(spark.sql("SELECT * FROM sk_s3_raw WHERE key IS NOT NULL"))
    assert opts["secret_key"] not in text
    reader = SavepointReader.read(spark, uri, storage_options=opts)
    tables = reader.register("skremote")
    assert tables == {"skremote_counter": ["keyed", "timers"]}
    assert spark.sql("SELECT count(*) AS n FROM skremote_counter.keyed").first().n == 200
    assert spark.sql("SELECT sum(count) AS s FROM skremote_counter.keyed").first().s == sum(range(200))


def test_wrong_credentials_through_spark_name_the_uri_only(spark, s3_server, statekit_on_s3):
    _, uri = statekit_on_s3
    bad = {**s3_server.options(), "secret_key": "NotTheSecretSpark1"}
    with pytest.raises(StorageAccessError) as e:
        SavepointReader.read(spark, uri, storage_options=bad)
    assert uri in str(e.value) and "NotTheSecretSpark1" not in str(e.value)


@contextlib.contextmanager
def _no_driver_disk(spark, tmp_path):
    """Run a write as on a cluster, where the executors cannot reach the driver's disk: the driver's temp
    directory is one that does not exist (any staging there fails) and the Python workers get a TMPDIR of their
    own, which must hold nothing afterwards. Checks that the workers really run with that TMPDIR."""
    import tempfile

    sc = spark.sparkContext
    workers = tmp_path / "executor-tmp"
    workers.mkdir()
    saved_env, saved_dir = sc.environment.get("TMPDIR"), tempfile.tempdir
    sc.environment["TMPDIR"] = str(workers)  # new Python workers (keyed by their environment) get it
    try:
        seen = spark.range(2, numPartitions=2).rdd.map(lambda _: __import__("tempfile").gettempdir()).collect()
        assert set(seen) == {str(workers)}
        tempfile.tempdir = str(tmp_path / "driver-tmp-absent")
        yield workers
    finally:
        tempfile.tempdir = saved_dir
        if saved_env is None:
            sc.environment.pop("TMPDIR", None)
        else:
            sc.environment["TMPDIR"] = saved_env
    assert list(workers.rglob("*")) == []  # the tasks streamed their files to the store: nothing on their disk


def test_spark_writes_and_converts_to_s3(spark, s3_server, s3_prefix, statekit_on_s3, tmp_path):
    """A savepoint on the server re-hashed by Spark tasks to 256 key groups and written to the server, and
    converted by Spark to Flink's format on the server: both read back with the source's rows. Neither touches
    the driver's disk (its temp directory does not exist during the writes): each task writes under the target."""
    local, uri = statekit_on_s3
    opts = s3_server.options()
    want = Savepoint.open(local)
    with _no_driver_disk(spark, tmp_path):
        remote = (SavepointWriter.from_existing_savepoint(spark, uri, storage_options=opts)
                  .with_max_parallelism("counter", 256))
        out = remote.write(f"{s3_prefix}/rehashed", storage_options=opts)
        flink = SavepointWriter.from_existing_savepoint(spark, uri, storage_options=opts).write(
            f"{s3_prefix}/as-flink", format="flink", storage_options=opts)
    assert str(out) == f"{s3_prefix}/rehashed"
    back = Savepoint.open(out, storage_options=opts)
    assert back.operator("counter").max_parallelism == 256
    assert back.keyed_table("counter").sort_by("key").equals(want.keyed_table("counter").sort_by("key"))
    timers = back.timers("counter").sort_by("key")  # the same timers, in their key groups of 256
    assert timers.drop_columns(["key_group"]).equals(want.timers("counter").sort_by("key").drop_columns(["key_group"]))
    assert timers.column("key_group").to_pylist() == [assign_to_key_group(k, 256, "bigint")
                                                      for k in timers.column("key").to_pylist()]
    # to Flink's format on the server, from the statekit savepoint on the server
    got = Savepoint.open(flink, storage_options=opts)
    assert isinstance(got, FlinkSavepoint)
    assert got.keyed_table("counter").sort_by("key").select(["key", "count", "seen"]).equals(
        want.keyed_table("counter").sort_by("key").select(["key", "count", "seen"]))
    assert not [k for k in s3_server.keys(s3_prefix.split("/", 3)[3]) if re.search(r"inprogress|statekit-", k)]


def test_spark_bootstrap_to_s3_from_tasks_and_nothing_left_on_failure(spark, s3_server, s3_prefix, tmp_path):
    """A bootstrap from a DataFrame straight to the server, with no driver disk;
    a bootstrap whose tasks fail (a duplicate key) leaves nothing under its target and says why; an existing
    target is refused before any Spark job runs."""
    from statekit.errors import DuplicateKeyError, SavepointExistsError
    from statekit.spark import OperatorTransformation
    from statekit.state import ValueStateDescriptor

    opts = s3_server.options()
    df = spark.range(0, 5000, numPartitions=4).selectExpr("id", "id * 2 as amount")
    cols = OperatorTransformation.bootstrap_with(df).key_by("id").columns(amount=ValueStateDescriptor("total", "bigint"))
    with _no_driver_disk(spark, tmp_path):  # (Flink's format from Spark tasks: test_spark_writes_and_converts_to_s3)
        out = SavepointWriter.new_savepoint(spark, max_parallelism=64).with_operator("sum", cols).write(
            f"{s3_prefix}/boot", storage_options=opts)
        rekeyed = (SavepointWriter.from_existing_savepoint(spark, out, storage_options=opts)
                   .rekey("sum", "key + 1").write(f"{s3_prefix}/boot-rekeyed", storage_options=opts))
    table = Savepoint.open(out, storage_options=opts).keyed_table("sum").sort_by("key")
    assert table.column("key").to_pylist() == list(range(5000))
    assert table.column("total").to_pylist() == [2 * k for k in range(5000)]
    table = Savepoint.open(rekeyed, storage_options=opts).keyed_table("sum").sort_by("key")
    assert table.column("key").to_pylist() == list(range(1, 5001))
    assert table.column("total").to_pylist() == [2 * (k - 1) for k in range(1, 5001)]
    dup = spark.range(0, 4000, numPartitions=4).selectExpr("id % 3000 as id", "id as amount")
    bad = OperatorTransformation.bootstrap_with(dup).key_by("id").columns(amount=ValueStateDescriptor("total", "bigint"))
    with pytest.raises(DuplicateKeyError):
        SavepointWriter.new_savepoint(spark, max_parallelism=64).with_operator("sum", bad).write(
            f"{s3_prefix}/boot-dup", storage_options=opts)
    assert s3_server.keys(f"{s3_prefix.split('/', 3)[3]}/boot-dup") == []  # what the tasks wrote was removed
    with pytest.raises(SavepointExistsError):
        SavepointWriter.new_savepoint(spark, max_parallelism=64).with_operator("sum", cols).write(
            f"{s3_prefix}/boot", storage_options=opts)
    # the tasks may not write there (a read-only user): a typed error on the driver naming the URI, no secret
    with pytest.raises(StorageAccessError) as e:
        SavepointWriter.new_savepoint(spark, max_parallelism=64).with_operator("sum", cols).write(
            f"{s3_prefix}/boot-denied", storage_options=s3_server.options("reader"))
    assert f"{s3_prefix}/boot-denied" in str(e.value) and s3_server.reader["secret_key"] not in str(e.value)
    assert s3_server.keys(f"{s3_prefix.split('/', 3)[3]}/boot-denied") == []


def test_spark_sql_bootstrap_to_s3_from_tasks(spark, s3_server, s3_prefix, tmp_path):
    """A SQL bootstrap computed by Spark, its executors writing the operator's state files straight under the
    target URI (no driver disk), the template's other operators carried: as the local engine's."""
    from statekit.format.storage import locate
    from statekit.savepoint import check
    from statekit.savepoint.sql_bootstrap import bootstrap_sql as bootstrap_local
    from statekit.spark import bootstrap_sql
    from tests.flink.sql_restore import orders1

    from .test_flink_writes_s3 import PLAN, TEMPLATE, _rows

    opts = s3_server.options()
    template = locate(s3_server.upload_dir(TEMPLATE, s3_prefix.split("/", 3)[3] + "/template"), storage_options=opts)
    target = locate(f"{s3_prefix}/boot", storage_options=opts)
    df = spark.createDataFrame(orders1())
    with _no_driver_disk(spark, tmp_path):
        assert bootstrap_sql(df, template, target, operator="6_group-aggregate", plan=PLAN).written
    bootstrap_local(orders1(), TEMPLATE, tmp_path / "local", operator="6_group-aggregate", plan=PLAN)
    got, want = Savepoint.open(target, plan=PLAN), Savepoint.open(tmp_path / "local", plan=PLAN)
    assert _rows(got, lists=sorted) == _rows(want, lists=sorted)  # (Spark gathers DISTINCT values in another order)
    assert check(target).ok


@pytest.mark.extended
def test_spark_rekeys_a_flink_savepoint_on_s3_to_s3(spark, s3_server, s3_prefix):
    """A Flink corpus savepoint on the server, re-keyed (Long -> String) by Spark back to the server as Flink."""
    opts = s3_server.options()
    case = savepoint("long-hashmap-canonical")
    src = s3_server.upload_dir(case, f"{s3_prefix.split('/', 3)[3]}/flink-src")
    target = f"{s3_prefix}/flink-rekeyed"
    (SavepointWriter.from_existing_savepoint(spark, src, storage_options=opts)
     .rekey("counter", "cast(key as string)", key_type="string").write(target, storage_options=opts))
    rekeyed = Savepoint.open(target, storage_options=opts)
    assert isinstance(rekeyed, FlinkSavepoint)
    before = Savepoint.open(case).keyed_table("counter").sort_by("key")
    after = rekeyed.keyed_table("counter")
    assert after.schema.field("key").type == pa.string()
    assert sorted(after.column("key").to_pylist()) == sorted(str(k) for k in before.column("key").to_pylist())
    assert not [k for k in s3_server.keys(s3_prefix.split("/", 3)[3]) if re.search(r"inprogress|statekit-", k)]


def test_s3a_settings_follow_pyspark_hadoop_and_the_endpoint():
    from statekit.spark.session import _needs_s3a, hadoop_version, s3a_conf

    conf = s3a_conf({"AWS_ENDPOINT_URL": "http://127.0.0.1:9000", "AWS_REGION": "eu-west-1",
                     "AWS_SECRET_ACCESS_KEY": "never-in-conf"})
    assert conf["spark.jars.packages"] == f"org.apache.hadoop:hadoop-aws:{hadoop_version()}"
    assert hadoop_version().startswith("3.")
    assert conf["spark.hadoop.fs.s3a.endpoint"] == "http://127.0.0.1:9000"
    assert conf["spark.hadoop.fs.s3a.path.style.access"] == "true"
    assert conf["spark.hadoop.fs.s3a.connection.ssl.enabled"] == "false"
    assert conf["spark.hadoop.fs.s3a.endpoint.region"] == "eu-west-1"
    assert "never-in-conf" not in repr(conf)
    assert "spark.hadoop.fs.s3a.endpoint" not in s3a_conf({})
    assert _needs_s3a(["/local", "s3a://b/sp"]) and _needs_s3a(["s3://b/sp"]) and not _needs_s3a(["/x", "gs://b/y"])


_JVM_S3A = r"""
import json, sys
from statekit.spark import SavepointReader, spark_session
uri, out = sys.argv[1], sys.argv[2]
spark = spark_session(paths=[uri])
# statekit's reader without storage options: the executors' environment has the credentials and endpoint
reader = SavepointReader.read(spark, uri)
keyed = sorted((r.key, r["count"]) for r in reader.read_keyed_state("counter").collect())
# Spark's own Parquet reader and writer on s3a:// through hadoop-aws from the factory
files = [f"{uri.replace('s3://', 's3a://')}/{e.path}" for e in reader.savepoint.operator("counter").files_of("keyed")]
jvm = sorted((r.key, r["count"]) for r in spark.read.parquet(*files).select("key", "count").collect())
spark.read.parquet(*files).select("key", "count").write.parquet(out)
back = spark.read.parquet(out).count()
print(json.dumps({"keyed": keyed, "jvm": jvm, "back": back}))
"""


@pytest.mark.extended
def test_session_factory_adds_hadoop_aws_for_s3a(s3_server, statekit_on_s3, s3_prefix, tmp_path):
    """A fresh session from `spark_session(paths=[s3 URI])`: credentials only in the environment (never in storage
    options or the Spark configuration), Spark's JVM Parquet reader and writer reach the server through S3A."""
    import json
    import os
    import subprocess
    import sys

    _, uri = statekit_on_s3
    opts = s3_server.options()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "PYSPARK_", "SPARK_"))}
    env.update(AWS_ACCESS_KEY_ID=opts["access_key"], AWS_SECRET_ACCESS_KEY=opts["secret_key"],
               AWS_ENDPOINT_URL=opts["endpoint_url"], AWS_REGION=opts["region"])
    script = tmp_path / "jvm_s3a.py"
    script.write_text(_JVM_S3A)
    out = f"{s3_prefix.replace('s3://', 's3a://')}/jvm-written"
    run = subprocess.run([sys.executable, str(script), uri, out], env=env, capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, run.stderr[-3000:]
    got = json.loads(run.stdout.strip().splitlines()[-1])
    want = [[k, k] for k in range(200)]
    assert got["keyed"] == want and got["jvm"] == want and got["back"] == 200
    assert opts["secret_key"] not in run.stdout + run.stderr
