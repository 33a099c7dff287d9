"""The same SQL over every state kind gives the same rows on DuckDB (statekit.sql) and Spark (register())."""

from __future__ import annotations

import decimal
import json

import pytest

import statekit
from statekit.spark import SavepointReader

from .conftest import run_runner
from .test_commands import RECORDS, run_job

QUERIES = [
    "SELECT key, total FROM accounts.keyed",                                       # keyed value
    "SELECT key, stats.n AS n, stats.last AS last FROM accounts.keyed",             # struct value
    "SELECT key, history FROM accounts.keyed WHERE key IN (1, 2, 3)",               # list, pruned
    "SELECT key, cardinality(history) AS n FROM accounts.keyed",
    "SELECT key, by_kind['big'] AS big, cardinality(by_kind) AS kinds FROM accounts.keyed",  # map
    "SELECT key, by_kind FROM accounts.keyed WHERE key = 7",
    "SELECT key, timestamp, domain FROM accounts.timers",                           # timers
    "SELECT t.key, count(*) AS timers, max(k.total) AS total FROM accounts.timers t "
    "JOIN accounts.keyed k ON t.key = k.key GROUP BY t.key",
    "SELECT subtask, idx, value FROM offsets.items",                                # operator list state
    "SELECT idx, value FROM offsets.everyone",                                      # union state
    "SELECT key, value FROM accounts.rules",                                        # broadcast state
    "SELECT count(*) AS n, sum(total) AS s FROM accounts.keyed WHERE total > 1000 OR key = 3",
]


def _canon(rows: list[dict]) -> list[str]:
    def fix(v):
        if isinstance(v, list) and v and all(isinstance(p, tuple) and len(p) == 2 for p in v):
            return sorted([list(p) for p in v])  # a map: order of entries does not matter
        if isinstance(v, dict):
            return {k: fix(x) for k, x in v.items()}
        if isinstance(v, list):
            return [fix(x) for x in v]
        if isinstance(v, decimal.Decimal) and v == v.to_integral_value():
            return int(v)  # DuckDB sums bigints as hugeint (decimal(38,0) in Arrow), Spark as bigint
        return v
    return sorted(json.dumps({k: fix(v) for k, v in r.items()}, sort_keys=True, default=str) for r in rows)


@pytest.fixture(scope="module")
def savepoint(tmp_path_factory):
    path = tmp_path_factory.mktemp("engines") / "sp"
    run_job(path, RECORDS)
    return path


@pytest.mark.spark
def test_duckdb_and_spark_give_the_same_rows(spark, savepoint):
    SavepointReader.read(spark, str(savepoint)).register()
    for q in QUERIES:
        local = statekit.sql(savepoint, q).to_pylist()
        remote = spark.sql(q).toArrow().to_pylist()
        assert local, q
        assert _canon(local) == _canon(remote), q


@pytest.mark.spark
def test_cli_engine_spark_matches_duckdb(spark, savepoint):
    q = "SELECT key, total, stats.n AS n FROM accounts.keyed WHERE key IN (4, 5) ORDER BY key"
    on_spark = run_runner(["query", savepoint, q, "--engine", "spark", "--json"])
    on_duckdb = run_runner(["query", savepoint, q, "--json"])
    assert on_spark.exit_code == 0 and on_duckdb.exit_code == 0, on_spark.output + on_duckdb.output
    assert json.loads(on_spark.stdout) == json.loads(on_duckdb.stdout)
    bad = run_runner(["query", savepoint, "SELECT * FROM nowhere.keyed", "--engine", "spark"])
    assert bad.exit_code == 2 and "accounts: keyed, timers" in bad.output


@pytest.mark.spark
def test_rekey_on_spark_equals_the_local_engine(spark, savepoint, tmp_path):
    from statekit.savepoint import Savepoint
    from statekit.savepoint.diff import diff

    for engine in ("spark", "local"):
        result = run_runner(["rekey", savepoint, tmp_path / engine, "--uid", "accounts", "--expr", "key + 1000",
                             "--engine", engine, "--apply"])
        assert result.exit_code == 0, result.output
    assert diff(tmp_path / "spark", tmp_path / "local").same
    assert Savepoint.open(tmp_path / "spark").get("accounts", 1007) == Savepoint.open(savepoint).get("accounts", 7)
