"""The CLI on Spark streaming checkpoints: inspect, show, get, query, check, stats, diff, repartition."""

from __future__ import annotations

import json

from spark_corpus import case_dir, copy_case
from typer.testing import CliRunner

from statekit_cli.app import app


def run(*args):
    result = CliRunner().invoke(app, [str(a) for a in args], env={"COLUMNS": "200"})
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result.exit_code, result.stdout + (result.stderr if hasattr(result, "stderr") else "")


CP = case_dir("tws-rocksdb") / "checkpoint"
AGG = case_dir("agg-hdfs") / "checkpoint"


def test_inspect():
    code, out = run("inspect", CP, "--json")
    doc = json.loads(out)
    assert code == 0 and doc["batch"] == 5 and doc["provider"] == "rocksdb"
    assert sorted(doc["operators"][0]["tables"]) == ["$timers", "by_n", "count", "seen"]
    code, out = run("inspect", AGG, "--batch", "1")
    assert code == 0 and "batch 1 (version 2)" in out


def test_show_masks_values_unless_asked():
    code, out = run("show", CP, "--table", "seen")
    assert code == 0 and "•••" in out
    code, out = run("show", CP, "--table", "seen", "--values", "--json")
    rows = json.loads(out)
    assert code == 0 and {"partition_id": 2, "k": "c", "n": 8, "t": 161} in rows


def test_get_one_key():
    code, out = run("get", AGG, "--key", '{"k": "a", "n": 1}', "--json")
    assert code == 0 and json.loads(out) == [{"partition_id": 1, "k": "a", "n": 1, "count": 4, "sum": 18, "max": 10}]
    code, out = run("get", CP, "--key", "a", "--state", "by_n", "--json")
    assert code == 0 and [r["n"] for r in json.loads(out)] == [1, 2]
    code, out = run("get", AGG, "--key", '{"k": "nobody", "n": 1}')
    assert code == 1 and "key not found" in out


def test_query_on_duckdb():
    code, out = run("query", CP, "SELECT k, count FROM transformwithstateinpandasexec.count ORDER BY count DESC",
                    "--json")
    assert code == 0 and json.loads(out)[0] == {"k": "a", "count": 5}


def test_check_and_stats(tmp_path):
    code, out = run("check", AGG)
    assert code == 0 and out.startswith("OK")
    code, out = run("stats", AGG, "--json")
    assert code == 0 and sum(json.loads(out)[0]["entries"]) == 12
    cp = copy_case("agg-hdfs", tmp_path)
    f = cp / "state/0/1/3.delta"
    f.write_bytes(f.read_bytes()[:-3])
    code, out = run("check", cp)
    assert code == 1 and "3.delta" in out


def test_diff_two_batches():
    code, out = run("diff", AGG, AGG, "--batch", "0", "--to-batch", "2", "--json")
    tables = json.loads(out)
    assert code == 1 and len(tables[0]["added"]) == 5 and len(tables[0]["changed"]) == 4
    code, out = run("diff", AGG, AGG)
    assert code == 0 and "same" in out


def test_repartition(tmp_path):
    code, out = run("repartition", AGG, tmp_path / "out", "--partitions", "6")
    assert code == 0 and "spark.sql.shuffle.partitions=6" in out
    code, out = run("inspect", tmp_path / "out", "--json")
    assert json.loads(out)["operators"][0]["partitions"] == 6
    code, out = run("repartition", AGG, tmp_path / "out", "--partitions", "6")
    assert code != 0 and "exists" in out
