"""Keyed parts written by Spark's own Parquet writer: no Python pass over the rows, a Python pass over the files' footers.

`statekit.spark.parts` hands each task's rows to Python (``mapInArrow``) to write its files; moving
rows from the JVM into a Python worker costs more than Spark's whole Parquet write of them. When
nothing but the layout has to happen to the rows (columnar bootstrap, ``with_max_parallelism``,
``with_state_transform`` by SQL), this module lets the JVM do all of it:

1. The rows get their key group in the JVM (`statekit.spark.keygroup_column`; a null key raises
   there), rows with no state set are dropped, and (unless the partitions already hold disjoint
   key-group ranges, `write_grouped_parts_jvm`) Spark shuffles them by write bucket as
   `statekit.spark.parts` does and sorts each bucket by key group, so the ``key_group`` statistics
   of row groups (at most `ROW_GROUP_ROWS` rows) stay selective for point reads.
2. Spark's Parquet writer writes one file per task into a hidden directory of the staging tree.
3. A small job *describes* the files on the executors (`describe_file`: size, CRC-32 of the bytes,
   rows and key-group range from the footer, fsync; for new keys the duplicate-key check, reading
   only the key columns) and returns one row per file. The driver renames each file to the
   layout's name and records it; nothing proportional to the state passes through the driver.

Not for a URI target (``PartPlan.store``): the tasks stream their files to the store in Python there.

The files are statekit files (`statekit.format.keyed.keyed_schema`'s columns and types; Spark
marks ``key_group`` and nullable-sourced keys optional, which every reader and `check` accept:
they check the required columns' null counts). This path is taken only when every column already
has the exact Spark type of its declared type and that type is written by Spark's Parquet writer
as statekit reads it (`jvm_unavailable` says why not otherwise); the Python path stays the
fallback (no JDK, Spark Connect, timestamps, casts, task functions with user code).
"""

from __future__ import annotations

import os
import re
import threading
import time
import uuid
import zlib
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

import pyarrow as pa
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    BooleanType,
    ByteType,
    DataType,
    DateType,
    DecimalType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    MapType,
    ShortType,
    StringType,
    StructType,
)  # fmt: skip

from statekit.errors import NullKeyError, SavepointWriteError, StatekitError, StorageFullError
from statekit.format.files import CHECKSUM_ALGORITHM, ROW_GROUP_ROWS, make_dirs_below
from statekit.format.manifest import FileEntry
from statekit.spark.buckets import bucket_column

__all__ = ["jvm_unavailable", "describe_file", "run_write_job", "write_grouped_parts_jvm", "write_keyed_parts_jvm"]

#: Leaf types Spark's Parquet writer stores as statekit declares them (timestamps are not: INT96 by default).
_LEAVES = (BooleanType, ByteType, ShortType, IntegerType, LongType, FloatType, DoubleType, StringType, BinaryType,
           DateType, DecimalType)  # fmt: skip
#: How the JVM's null-key refusal is recognised in the job's failure (and the message it becomes).
_NULL_KEY = "statekit-null-key"
NULL_KEY_MESSAGE = "the key column holds null key(s); Flink forbids null keys. Drop or fill them."
#: Session settings that make Spark read each file as one partition (files map to files in `write_grouped_parts_jvm`).
_ONE_FILE_PER_PARTITION = {"spark.sql.files.maxPartitionBytes": str(1 << 50), "spark.sql.files.openCostInBytes": str(1 << 50)}
_conf_lock = threading.Lock()
_DESCRIPTION = "path string, rows long, bytes long, checksum string, key_group_start int, key_group_end int"
_SPARK_PART = re.compile(r"^part-(\d+)-")


def _writable(t: DataType) -> bool:
    if isinstance(t, StructType):
        return all(_writable(f.dataType) for f in t.fields)
    if isinstance(t, ArrayType):
        return _writable(t.elementType)
    if isinstance(t, MapType):
        return _writable(t.keyType) and _writable(t.valueType)
    return isinstance(t, _LEAVES)


def jvm_unavailable(df: DataFrame, columns: dict[str, str], schema: pa.Schema) -> str | None:
    """Why `df` cannot be written by Spark's Parquet writer as `schema`'s columns (None: it can).

    `columns` maps each of `schema`'s column names to `df`'s column holding it. Every column must
    have the exact Spark type of its declared type (no cast whose rules could differ from statekit's)
    and a type Spark writes as statekit reads it.
    """
    from pyspark.sql.pandas.types import from_arrow_type

    from statekit.spark.keygroup_column import jvm_classes_unavailable

    reason = jvm_classes_unavailable(df.sparkSession)
    if reason is not None:
        return reason
    if sorted(columns.values()) != sorted(df.columns):
        return f"columns {sorted(df.columns)} are not exactly the layout's"
    for field in schema:
        try:
            declared = from_arrow_type(field.type)
        except Exception:  # noqa: BLE001 - a type Spark cannot express
            return f"column {field.name!r}: Spark has no type for {field.type}"
        actual = df.schema[columns[field.name]].dataType
        if actual.simpleString() != declared.simpleString():
            return f"column {field.name!r} is {actual.simpleString()}, declared {declared.simpleString()}"
        if not _writable(actual):
            return f"column {field.name!r}: Spark's Parquet writer does not store {actual.simpleString()} as statekit does"
    return None


def _key_group(spark: SparkSession, key: Column, max_parallelism: int) -> Column | None:
    from statekit.spark.keygroup_column import key_group_column

    kg = key_group_column(spark, key, max_parallelism)
    if kg is None:
        return None
    # null exactly for a null key: refused in the task, before anything of the row is written
    return F.coalesce(kg, F.raise_error(F.lit(f"{_NULL_KEY}: {NULL_KEY_MESSAGE}")).cast("int"))


def _with_state(df: DataFrame, states: list[str]) -> DataFrame:
    """Rows with some state set (the format keeps no others; `statekit.format.keyed.drop_unset_rows`)."""
    return df.where(_any_set(states)) if states else df


def write_keyed_parts_jvm(df: DataFrame, key_col: str, plan: Any,
                          duplicate: Callable[[Any], None] | None = None) -> list[FileEntry] | None:  # fmt: skip
    """`parts.write_keyed_parts` of a columnar keyed table by Spark's Parquet writer; None if it cannot (see module).

    `duplicate`, given a key that appears twice, may raise a better error than the default
    `DuplicateKeyError` (then the key type must be one `PartFiles` checks, else None is returned).
    """
    schema = plan.keyed_schema
    if schema is None or plan.store is not None or (duplicate is not None and (plan.namespace_type is not None
                                                     or not _jvm_checks_keys(schema.field("key").type))):  # fmt: skip
        return None
    columns = {f.name: key_col if f.name == "key" else f.name for f in schema}
    if jvm_unavailable(df, columns, schema) is not None:
        return None
    states = [f.name for f in schema if f.name not in ("key", "namespace")]
    spark = df.sparkSession
    kg = _key_group(spark, F.col(f"`{key_col}`"), plan.max_parallelism)
    if kg is None:
        return None
    rows = df.select(kg.alias("key_group"),
                     *[F.col(f"`{columns[f.name]}`").alias(f.name) for f in schema])  # fmt: skip
    if states:  # rows with no state set are dropped; a null key still reaches its refusal
        rows = rows.where(F.col("key").isNull() | _any_set(states))
    rows = rows.repartition(plan.buckets, bucket_column(plan, "key_group")).sortWithinPartitions("key_group")
    return _write(rows, plan, check_keys=True, duplicate=duplicate)


def _any_set(states: list[str]) -> Column:
    cond = F.col(f"`{states[0]}`").isNotNull()
    for s in states[1:]:
        cond = cond | F.col(f"`{s}`").isNotNull()
    return cond


@contextmanager
def one_file_per_partition(spark: SparkSession) -> Iterator[None]:
    """While inside, Spark's file scans read each file as one partition (never split, never packed)."""
    with _conf_lock:
        saved: dict[str, str | None] = {k: spark.conf.get(k, None) for k in _ONE_FILE_PER_PARTITION}
        for k, v in _ONE_FILE_PER_PARTITION.items():
            spark.conf.set(k, v)
        try:
            yield
        finally:
            for k, old in saved.items():
                if old is None:
                    spark.conf.unset(k)
                else:
                    spark.conf.set(k, old)


def write_grouped_parts_jvm(df: DataFrame, plan: Any) -> list[FileEntry] | None:
    """`parts.write_grouped_parts` by Spark's Parquet writer (files map to files; no shuffle); None if it cannot.

    `df` must come from a scan whose partitions are whole files of disjoint key-group ranges (run
    the write inside `one_file_per_partition`), transformed row by row, so each task's file holds
    whole key groups in the source's order.
    """
    schema = plan.keyed_schema
    if schema is None or plan.store is not None:  # Spark's writer writes local directories; a URI target: Python
        return None
    columns = {"key_group": "key_group", **{f.name: f.name for f in schema}}
    full = pa.schema([pa.field("key_group", pa.int32()), *schema])
    if jvm_unavailable(df, columns, full) is not None:
        return None
    states = [f.name for f in schema if f.name not in ("key", "namespace")]
    rows = _with_state(df.select("key_group", *[F.col(f"`{f.name}`") for f in schema]), states)
    return _write(rows, plan, check_keys=False)


def _write(rows: DataFrame, plan: Any, *, check_keys: bool,
           duplicate: Callable[[Any], None] | None = None) -> list[FileEntry]:  # fmt: skip
    spark = rows.sparkSession
    root = Path(plan.root)
    spark_dir = root / plan.op_dir / f".spark-{uuid.uuid4().hex}"
    make_dirs_below(root, spark_dir.parent)
    options = {
        # row groups small enough for point reads (as `statekit.format.files.write_parquet` cuts them)
        "parquet.block.row.count.limit": str(ROW_GROUP_ROWS),
        "compression": "snappy",
        "maxRecordsPerFile": "0",  # one file per task: a key group never spans two files
        # no Hadoop .crc side files (statekit checksums the files itself)
        "fs.file.impl": "org.apache.hadoop.fs.RawLocalFileSystem", "fs.file.impl.disable.cache": "true",
        "mapreduce.fileoutputcommitter.algorithm.version": "2",
        # dictionaries pay off for text only (as in write_parquet)
        **{f"parquet.enable.dictionary#{f.name}": "false" for f in plan.keyed_schema if not _is_text(f.type)},
        "parquet.enable.dictionary#key_group": "false",
    }
    run_write_job(spark, lambda: rows.write.options(**options).parquet(spark_dir.as_uri()), root)
    files = sorted(p.name for p in spark_dir.iterdir() if p.name.endswith(".parquet"))
    if not files:
        _remove(spark_dir)
        return []
    paths = [str(spark_dir / f) for f in files]
    has_ns = plan.namespace_type is not None
    key_type = plan.keyed_schema.field("key").type
    if not check_keys or (not has_ns and _jvm_checks_keys(key_type)):
        described = run_write_job(spark, lambda: _describe_in_jvm(spark, paths, check_keys, key_type, plan.what,
                                                                       duplicate), root)  # fmt: skip
    else:
        described = run_write_job(spark, lambda: _describe_in_python(spark, paths, has_ns, plan.what), root)
    entries = []
    keyed = root / plan.op_dir / "keyed"
    make_dirs_below(root, keyed)
    for d in sorted(described, key=lambda d: d["path"]):
        src = Path(d["path"])
        if not d["rows"]:
            os.unlink(src)
            continue
        m = _SPARK_PART.match(src.name)
        task = int(m.group(1)) if m else files.index(src.name)
        name = f"part-b{task:05d}-00000-kg{d['key_group_start']:05d}-{d['key_group_end']:05d}.parquet"
        os.rename(src, keyed / name)
        rel = f"{plan.op_dir}/keyed/{name}"
        entries.append(FileEntry(rel, "keyed", d["rows"], d["bytes"], d["checksum"], None, d["key_group_start"],
                                 d["key_group_end"]))  # fmt: skip
    _remove(spark_dir)
    _check_disjoint(entries, plan.what)
    return entries


def _jvm_checks_keys(t: pa.DataType) -> bool:
    """Whether `PartFiles` checks keys of Arrow type `t` for duplicates (one INT32/INT64/BINARY/BOOLEAN column)."""
    return (pa.types.is_integer(t) or pa.types.is_string(t) or pa.types.is_binary(t) or pa.types.is_boolean(t)
            or pa.types.is_date32(t))  # fmt: skip


def _describe_in_jvm(spark: SparkSession, paths: list[str], check_keys: bool, key_type: pa.DataType, what: str,
                     duplicate: Callable[[Any], None] | None = None) -> list[dict[str, Any]]:  # fmt: skip
    """The files' descriptions by `io.statekit.spark.PartFiles` (one JVM task per file, no Python worker)."""
    from statekit.format.keyed import check_unique_keys
    from statekit.spark import pruning

    gateway: Any = spark.sparkContext._gateway
    jvm: Any = spark._jvm
    cls = pruning.statekit_class(spark, "io.statekit.spark.PartFiles")
    jsc: Any = spark.sparkContext._jsc
    types = gateway.new_array(jvm.java.lang.Class, 4)
    types[0], types[1] = jsc.getClass(), jvm.java.lang.Class.forName("[Ljava.lang.String;")
    types[2] = types[3] = jvm.java.lang.Boolean.TYPE
    jpaths = gateway.new_array(jvm.java.lang.String, len(paths))
    for i, p in enumerate(paths):
        jpaths[i] = p
    args = gateway.new_array(jvm.java.lang.Object, 4)
    args[0], args[1], args[2] = jsc, jpaths, bool(check_keys)
    args[3] = bool(pa.types.is_string(key_type))
    out = []
    for line in cls.getMethod("describe", types).invoke(None, args):
        path, rows, size, crc, lo, hi, dup = str(line).split("\t", 6)
        if dup:  # the same error, worded as the Python check words it
            value: Any = dup[1:]
            if pa.types.is_binary(key_type):
                value = bytes.fromhex(value)
            elif pa.types.is_boolean(key_type):
                value = value == "true"
            elif not pa.types.is_string(key_type):
                value = int(value)
            if duplicate is not None:
                duplicate(value)
            keys = pa.array([value, value], pa.int32() if pa.types.is_date32(key_type) else key_type)
            check_unique_keys(pa.table({"key": keys.cast(key_type)}), has_namespace=False, what=what)
        out.append({"path": path, "rows": int(rows), "bytes": int(size), "checksum": f"{CHECKSUM_ALGORITHM}:{crc}",
                    "key_group_start": int(lo), "key_group_end": int(hi)})  # fmt: skip
    return out


def _describe_in_python(spark: SparkSession, paths: list[str], has_ns: bool, what: str) -> list[dict[str, Any]]:
    """The files' descriptions by `describe_file` in Python tasks (keys of types `PartFiles` does not check)."""
    def describe(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            got = [describe_file(paths[i], check_keys=True, has_namespace=has_ns, what=what)
                   for i in batch.column(0).to_pylist()]  # fmt: skip
            yield pa.RecordBatch.from_pylist(got, schema=_ARROW_DESCRIPTION)

    return spark.range(0, len(paths), 1, len(paths)).mapInArrow(describe, _DESCRIPTION).toArrow().to_pylist()


_ARROW_DESCRIPTION = pa.schema([("path", pa.string()), ("rows", pa.int64()), ("bytes", pa.int64()),
                                ("checksum", pa.string()), ("key_group_start", pa.int32()),
                                ("key_group_end", pa.int32())])  # fmt: skip


def _is_text(t: pa.DataType) -> bool:
    return pa.types.is_string(t) or pa.types.is_binary(t)


def describe_file(path: str, *, check_keys: bool, has_namespace: bool, what: str) -> dict[str, Any]:
    """One Spark-written part's description (executor side): rows and key-group range from its footer,
    size and CRC-32 of its bytes (read once, then fsynced); with `check_keys`, its keys must be unique."""
    import pyarrow.parquet as pq

    from statekit.format.keyed import check_unique_keys

    crc, size = 0, 0
    with open(path, "rb") as fh:
        while chunk := fh.read(8 << 20):
            crc = zlib.crc32(chunk, crc)
            size += len(chunk)
        os.fsync(fh.fileno())  # durable before the manifest naming it is
    pf = pq.ParquetFile(path)
    md = pf.metadata
    lo, hi = None, None
    kg_index = pf.schema_arrow.get_field_index("key_group")
    for i in range(md.num_row_groups):
        st = md.row_group(i).column(kg_index).statistics
        if md.row_group(i).num_rows == 0:
            continue
        if st is None or not st.has_min_max:  # Spark always writes them; read the column if not
            kg = pf.read_row_group(i, columns=["key_group"]).column(0)
            import pyarrow.compute as pc

            mm = pc.min_max(kg).as_py()
            rg_lo, rg_hi = mm["min"], mm["max"]
        else:
            rg_lo, rg_hi = st.min, st.max
        lo = rg_lo if lo is None else min(lo, rg_lo)
        hi = rg_hi if hi is None else max(hi, rg_hi)
    if check_keys and md.num_rows:
        check_unique_keys(pf.read(columns=["key", "namespace"] if has_namespace else ["key"]),
                          has_namespace=has_namespace, what=what)  # fmt: skip
    return {"path": path, "rows": md.num_rows, "bytes": size, "checksum": f"{CHECKSUM_ALGORITHM}:{crc & 0xFFFFFFFF:08x}",
            "key_group_start": int(lo or 0), "key_group_end": int(hi or 0)}  # fmt: skip


def _check_disjoint(entries: list[FileEntry], what: str) -> None:
    spans = sorted((int(e.key_group_start or 0), int(e.key_group_end or 0), e.path) for e in entries)
    for a, b in zip(spans, spans[1:]):
        if b[0] <= a[1]:  # a task held part of another's key groups: the input was not grouped as promised
            raise SavepointWriteError(
                f"{what}: files {a[2]} and {b[2]} share key groups {b[0]}..{min(a[1], b[1])}; the input's partitions "
                "did not hold disjoint key-group ranges. Nothing was written."
            )


def _remove(directory: Path) -> None:
    import shutil

    shutil.rmtree(directory, ignore_errors=True)


def run_write_job(spark: SparkSession, action: Any, root: "Path | str") -> Any:
    """Run `action` (Spark jobs) as a job group; on failure wait until its tasks ended (so none writes after
    the staging tree - or, for a URI target, what is under its prefix - is removed) and raise the failure as
    statekit's typed error where there is one."""
    sc = spark.sparkContext
    group = f"statekit-write-{uuid.uuid4().hex}"
    saved = sc.getLocalProperty("spark.jobGroup.id")
    sc.setLocalProperty("spark.jobGroup.id", group)
    try:
        return action()
    except StatekitError:
        _wait_for_tasks(spark, group)
        raise
    except Exception as exc:
        _wait_for_tasks(spark, group)
        text = str(exc)
        if _NULL_KEY in text:
            raise NullKeyError(NULL_KEY_MESSAGE) from None
        if "No space left on device" in text or "Disk quota exceeded" in text:
            raise StorageFullError(
                f"no space left while writing {root} (No space left on device); nothing was published and the "
                "partial output was removed. Free space (or raise the quota) and retry."
            ) from None
        raise
    finally:
        sc.setLocalProperty("spark.jobGroup.id", saved)  # type: ignore[arg-type]


def _wait_for_tasks(spark: SparkSession, group: str, wait_s: float = 60.0) -> None:
    tracker = spark.sparkContext.statusTracker()
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        active = 0
        for job in tracker.getJobIdsForGroup(group):
            info = tracker.getJobInfo(job)
            for stage in info.stageIds if info is not None else ():
                s = tracker.getStageInfo(stage)
                active += s.numActiveTasks if s is not None else 0
        if not active:
            return
        time.sleep(0.05)
