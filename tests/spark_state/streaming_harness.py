"""Run the corpus queries (tests/spark_state/generator) on a checkpoint with real Spark: restart with run-2 input.

The queries, inputs and expected results are the generator's (`generator/corpus.py`, `generator/model.py`);
this module runs them in the test session's Spark (no module-level side effects on the test process).
"""

from __future__ import annotations

import datetime as dt
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent / "generator"))
import model  # noqa: E402  (the generator's model: inputs, key rule)

#: the session settings the corpus was generated with (the offset log overrides the frozen ones on restart)
SESSION_CONF = {"spark.sql.session.timeZone": "UTC", "spark.sql.streaming.stateStore.minDeltasForSnapshot": "1",
                "spark.sql.streaming.stateStore.maintenanceInterval": "400ms", "spark.sql.adaptive.enabled": "false"}


def to_py(v: Any) -> Any:
    """A Spark value as expected.json holds it; timestamps as microseconds since the epoch."""
    if isinstance(v, dt.datetime):
        seconds = v.timestamp() if v.tzinfo is not None else v.replace(tzinfo=None).timestamp()
        return round(seconds * 1_000_000)
    if hasattr(v, "asDict"):
        return {k: to_py(x) for k, x in v.asDict(recursive=False).items()}
    if isinstance(v, list):
        return [to_py(x) for x in v]
    if isinstance(v, dict):
        return {str(k): to_py(x) for k, x in v.items()}
    return v


def _count_fn(key, pdfs, state):
    import pandas as pd

    if state.hasTimedOut:
        cnt, total, _ = state.get
        state.remove()
        yield pd.DataFrame({"k": [key[0]], "cnt": [cnt], "total": [total], "expired": [True]})
        return
    cnt, total, last_t = state.get if state.exists else (0, 0, 0)
    for pdf in pdfs:
        cnt += len(pdf)
        total += int(sum(int(x) for x in pdf["v"] if not pd.isna(x)))
        last_t = max([last_t] + [int(x) for x in pdf["t"]])
    state.update((cnt, total, last_t))
    state.setTimeoutTimestamp(last_t * 1000 + 5000)
    yield pd.DataFrame({"k": [key[0]], "cnt": [cnt], "total": [total], "expired": [False]})


def _processor():
    sys.path.insert(0, str(Path(__file__).parent / "generator"))
    # corpus.py sets TZ=UTC and the Python workers' interpreter at import: both already hold for the test session
    import corpus  # noqa: PLC0415

    return corpus.make_processor()


def build_query(spark, case: str, src: str):
    """The generator's query of `case` over the input directory `src` (see generator/corpus.py build_query)."""
    from pyspark.sql import functions as F
    from pyspark.sql.streaming.state import GroupStateTimeout

    def events():
        return (spark.readStream.schema("k STRING, n BIGINT, v BIGINT, t BIGINT")
                .option("maxFilesPerTrigger", 1).json(os.path.join(src, "events"))
                .withColumn("ts", F.timestamp_seconds("t")))

    if case == "agg":
        return events().groupBy("k", "n").agg(F.count(F.lit(1)).alias("cnt"), F.sum("v").alias("total"),
                                               F.max("v").alias("top")), "update"
    if case == "window_agg":
        df = (events().withWatermark("ts", "10 seconds").groupBy(F.window("ts", "10 seconds"), "k")
              .agg(F.count(F.lit(1)).alias("cnt"), F.sum("v").alias("total")))
        return df.select(F.col("window.start").alias("window_start"),
                         F.col("window.end").alias("window_end"), "k", "cnt", "total"), "append"
    if case == "dedup":
        return (events().withWatermark("ts", "10 seconds").dropDuplicatesWithinWatermark(["k", "n"])
                .select("k", "n", "v", "t")), "append"
    if case == "join":
        both = (spark.readStream.schema("s STRING, k STRING, t BIGINT, v BIGINT")
                .option("maxFilesPerTrigger", 1).json(os.path.join(src, "join")))
        left = (both.filter("s = 'L'").select(F.col("k").alias("lk"), F.timestamp_seconds("t").alias("lt"),
                                               F.col("v").alias("lv")).withWatermark("lt", "10 seconds"))
        right = (both.filter("s = 'R'").select(F.col("k").alias("rk"), F.timestamp_seconds("t").alias("rt"),
                                                F.col("v").alias("rv")).withWatermark("rt", "10 seconds"))
        j = left.join(right, F.expr("lk = rk AND rt >= lt - interval 5 seconds AND rt <= lt + interval 5 seconds"))
        return j.select("lk", "lt", "lv", "rk", "rt", "rv"), "append"
    if case == "pandas_state":
        return (events().withWatermark("ts", "10 seconds").groupBy("k").applyInPandasWithState(
            _count_fn, "k string, cnt long, total long, expired boolean",
            "cnt long, total long, last_t long", "update", GroupStateTimeout.EventTimeTimeout)), "update"
    if case == "tws":
        return (events().withWatermark("ts", "10 seconds").groupBy("k").transformWithStateInPandas(
            _processor(), "k string, count long, kind string", "Update", "EventTime")), "update"
    raise ValueError(case)


def input_files(case: str, run: str) -> list[list[tuple[str, list[dict]]]]:
    """[(relative path, rows)] per micro-batch of one run, in processing order."""
    out = []
    if case == "join":
        for i, (left, right) in enumerate(model.JOIN[run]):
            out.append([(f"join/{run}-{i}.json", [dict(s="L", k=a, t=b, v=c) for a, b, c in left]
                         + [dict(s="R", k=a, t=b, v=c) for a, b, c in right])])
    else:
        for i, rows in enumerate(model.EVENTS[run]):
            out.append([(f"events/{run}-{i}.json", model.event_dicts(rows))])
    return out


def _write(path: str, rows: list[dict]) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = os.path.join(os.path.dirname(path), "." + os.path.basename(path) + ".tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        for r in rows:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")
    os.replace(tmp, path)


def place_input(case_dir: Path, exp: dict, checkpoint: Path, src: Path) -> None:
    """Copy the run-1 input to `src` and point the checkpoint's file-source log at it (the log holds absolute
    paths, and a restart re-plans the last committed batch from them)."""
    import shutil

    shutil.copytree(case_dir / "input", src)
    old = "file://" + exp["generated_with"]["input_path_at_generation"]
    for log in (checkpoint / "sources").rglob("*"):
        if log.is_file() and not log.name.startswith("."):
            log.write_text(log.read_text("utf-8").replace(old, "file://" + str(src)), "utf-8")


def run_stream(spark, case: str, src: Path, checkpoint: Path, run: str = "run2") -> dict[int, list]:
    """Start the query on `checkpoint`, feed `run`'s files one micro-batch at a time, stop; outputs per batch id."""
    for sub in ("events", "join"):
        os.makedirs(src / sub, exist_ok=True)
    outputs: dict[int, list] = {}

    def sink(df, batch_id):
        outputs[int(batch_id)] = [to_py(r) for r in df.collect()]

    df, mode = build_query(spark, case, str(src))
    q = (df.writeStream.outputMode(mode).option("checkpointLocation", str(checkpoint))
         .foreachBatch(sink).queryName(f"{case}_{time.time_ns()}").start())
    try:
        for files in input_files(case, run):
            for rel, rows in files:
                _write(str(src / rel), rows)
            q.processAllAvailable()
        if q.exception():
            raise q.exception()
    finally:
        q.stop()
    return outputs


def canon_outputs(outs: dict[int, list]) -> dict[str, list[str]]:
    return {str(b): sorted(json.dumps(r, sort_keys=True, ensure_ascii=False) for r in rows)
            for b, rows in sorted(outs.items()) if rows}


def statestore_rows(spark, checkpoint: Path, case: str) -> list[tuple[str, int, Any, Any]]:
    """What Spark's own ``statestore`` source reads: (store, partition_id, key, value)."""
    spark.streams  # noqa: B018 - the source needs a StateStoreCoordinator (generator README, finding 1)
    reads = []
    if case == "tws":
        for var in ("count", "seen", "by_n", "$timers"):
            r = spark.read.format("statestore")
            r = r.option("readRegisteredTimers", "true") if var == "$timers" else r.option("stateVarName", var)
            reads.append((var, r.load(str(checkpoint))))
    elif case == "join":
        for store in ("left-keyToNumValues", "left-keyWithIndexToValue", "right-keyToNumValues",
                      "right-keyWithIndexToValue"):
            reads.append((store, spark.read.format("statestore").option("storeName", store).load(str(checkpoint))))
    else:
        reads.append(("default", spark.read.format("statestore").load(str(checkpoint))))
    got = []
    for store, df in reads:
        for row in df.collect():
            d = row.asDict(recursive=False)
            key, value = to_py(d["key"]), to_py(d.get("value"))
            if case == "tws" and store == "seen":
                value = to_py(d["list_element"]) if "list_element" in d else value
            if case == "tws" and store == "by_n":
                key, value = to_py(d["key"]), {**to_py(d["user_map_key"]), **to_py(d["user_map_value"])}
            if case == "tws" and store == "$timers":
                value = {"expiration_timestamp_ms": d["expiration_timestamp_ms"]}
            got.append((store, d["partition_id"], key, value))
    return got


def spark_partition(key: dict, case: str, store: str, partitions: int) -> int:
    """Spark's partition of a stored key at `partitions` partitions (the generator's Murmur3 model)."""
    if case == "window_agg":
        vt = [((key["window"]["start"], key["window"]["end"]), ["timestamp", "timestamp"]), (key["k"], "string")]
    elif case == "join":
        vt = [(key["field0"], "string")]
    elif case in ("agg", "dedup"):
        vt = [(key["k"], "string"), (key["n"], "long")]
    else:
        vt = [(key["k"], "string")]
    return model.spark_hash(vt) % partitions


def restart_results(spark, case: str, checkpoint: Path, src: Path, partitions: int) -> dict[str, Any]:
    """Spark's view of a repartitioned checkpoint, then its restart with run-2 input: everything the tests compare."""
    meta = [r.asDict() for r in spark.read.format("state-metadata").load(str(checkpoint)).collect()]
    before = statestore_rows(spark, checkpoint, case)
    for k, v in {**SESSION_CONF, "spark.sql.shuffle.partitions": str(partitions)}.items():
        spark.conf.set(k, v)
    outs = run_stream(spark, case, src, checkpoint)
    after = statestore_rows(spark, checkpoint, case)
    return {"num_partitions": sorted({r["numPartitions"] for r in meta}), "state_before": before,
            "outputs": canon_outputs(outs), "state_after": after}


#: the Python environment PySpark 4.1.0's pandas UDFs need (applyInPandasWithState and transformWithStateInPandas
#: fail with pyarrow 26 / pandas 3: generator/README.md finding 5); the tests run those queries in it
UDF_REQUIREMENTS = ["pyspark==4.1.0", "pandas<3", "pyarrow==21.0.0", "numpy", "protobuf"]


def main() -> None:
    """``python streaming_harness.py CASE CHECKPOINT INPUT PARTITIONS``: `restart_results` as JSON on stdout."""
    os.environ["TZ"] = "UTC"
    time.tzset()
    os.environ["PYSPARK_PYTHON"] = os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    case, checkpoint, src, partitions = sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3]), int(sys.argv[4])
    b = (SparkSession.builder.master("local[2]").appName("statekit-streaming-restart")
         .config("spark.ui.enabled", "false").config("spark.driver.memory", "1g")
         .config("spark.sql.shuffle.partitions", str(partitions)))
    for k, v in SESSION_CONF.items():
        b = b.config(k, v)
    spark = b.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    try:
        print("\n" + json.dumps(restart_results(spark, case, checkpoint, src, partitions), ensure_ascii=False))
    finally:
        spark.stop()


if __name__ == "__main__":
    main()
