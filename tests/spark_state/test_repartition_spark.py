"""Repartitioned checkpoints restarted by real Spark 4.1.0: outputs and final state equal the model's.

Each case: the committed corpus checkpoint (4 partitions) is repartitioned to M; Spark's own
``statestore`` and ``state-metadata`` sources read M partitions holding the same rows, each in the
partition Spark's hash gives it; the query restarted on it with ``spark.sql.shuffle.partitions=M``
and the generator's second input produces exactly the model's outputs, final state and watermark
(the same as the un-repartitioned restart). `make test` runs two cases (both providers, both
directions); `make test-extended` all seventeen in both directions.
"""

from __future__ import annotations

import json
import shutil

import pytest
import streaming_harness as H
from spark_corpus import CASES, case_dir, expected

from statekit.savepoint.spark_repartition import repartition

#: in `make test`: both providers, both directions (the pandas-UDF queries start their own JVM in another venv,
#: ~90 s each: tws and pandas_state run under `make test-extended`)
CORE = [("agg-hdfs", 8), ("window_agg-rocksdb_changelog", 2)]
EXTENDED = [(c, m) for c in CASES for m in (8, 2) if (c, m) not in CORE]


def _key(v):
    return json.dumps(v, sort_keys=True, ensure_ascii=False)


def _results(spark, case: str, out, src_in, m: int) -> dict:
    if case not in ("pandas_state", "tws"):
        return H.restart_results(spark, case, out, src_in, m)
    # pandas UDFs of PySpark 4.1.0 need pyarrow < 26 and pandas < 3: run those queries in a venv that has them
    import subprocess
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from venv_cache import cached_venv

    python, _ = cached_venv("spark-udf", H.UDF_REQUIREMENTS, probe="import pyspark, pandas, pyarrow, google.protobuf")
    r = subprocess.run([str(python), H.__file__, case, str(out), str(src_in), str(m)], capture_output=True, text=True,
                       timeout=900)
    assert r.returncode == 0, r.stderr[-3000:]
    got = json.loads(r.stdout.strip().splitlines()[-1])
    for k in ("state_before", "state_after"):
        got[k] = [tuple(x) for x in got[k]]
    return got


def _check(spark, tmp_path, case: str, m: int, on_executors: bool = False) -> None:
    exp = expected(case)
    name = case.split("-")[0]
    src_cp, src_in, out = tmp_path / "src" / "checkpoint", tmp_path / "src" / "input", tmp_path / "out"
    shutil.copytree(case_dir(case) / "checkpoint", src_cp)
    H.place_input(case_dir(case), exp, src_cp, src_in)
    if on_executors:
        from statekit.spark.streaming_repartition import repartition as on_spark

        on_spark(src_cp, out, partitions=m, spark=spark)
    else:
        repartition(src_cp, out, partitions=m)
    got = _results(spark, name, out, src_in, m)

    # Spark's own reader sees M partitions holding the corpus state, each key where Spark's hash puts it
    assert got["num_partitions"] == [m]
    want = [(p["storeName"], r["key"], r["value"]) for p in exp["state"] for r in p["rows"]]
    assert sorted(_key([s, k, v]) for s, _, k, v in got["state_before"]) == sorted(_key(list(w)) for w in want)
    assert all(0 <= p < m and p == H.spark_partition(k, name, s, m) for s, p, k, _ in got["state_before"])
    # the restarted query continued exactly: outputs, final state, last batch, watermark
    assert got["outputs"] == exp["outputs_run2"]
    want_final = exp["state_after_run2"]["rows"]
    assert sorted(_key([s, k, v]) for s, _, k, v in got["state_after"]) == sorted(
        _key([r["storeName"], r["key"], r["value"]]) for r in want_final)
    assert all(0 <= p < m and p == H.spark_partition(k, name, s, m) for s, p, k, _ in got["state_after"])
    last = max(int(p.name) for p in (out / "commits").iterdir() if p.name.isdigit())
    assert last == exp["state_after_run2"]["latest_batch_id"]
    commit = json.loads((out / "commits" / str(last)).read_text().split("\n")[1])
    assert commit["nextBatchWatermarkMs"] == exp["state_after_run2"]["watermark_ms"]
    assert sorted(int(p.name) for p in (out / "state" / "0").iterdir() if p.name.isdigit()) == list(range(m))


@pytest.mark.spark
@pytest.mark.slow
@pytest.mark.parametrize("case,m", CORE)
def test_repartitioned_checkpoint_restarts_exactly(spark, tmp_path, case, m):
    _check(spark, tmp_path, case, m)


@pytest.mark.spark
@pytest.mark.extended
@pytest.mark.parametrize("case,m", EXTENDED)
def test_every_case_repartitioned_restarts_exactly(spark, tmp_path, case, m):
    _check(spark, tmp_path, case, m)


@pytest.mark.spark
@pytest.mark.extended
@pytest.mark.parametrize("case,m", [("agg-rocksdb", 8), ("join-hdfs", 2), ("window_agg-rocksdb_changelog", 8)])
def test_repartitioned_on_executors_restarts_exactly(spark, tmp_path, case, m):
    _check(spark, tmp_path, case, m, on_executors=True)
