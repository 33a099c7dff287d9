"""Savepoints under paths Hadoop would misread (globs, URI escapes, non-ASCII, colons, backslashes) on every engine."""

from __future__ import annotations

import shutil

import pytest

from statekit.spark import SavepointReader

pytestmark = pytest.mark.spark

# Each name is a directory above the savepoint; together they cover every character the issue names.
NAMES = [
    "ünïcode-日本-é",
    "glob?*",
    "brackets[ab]{a,b}",
    "back\\slash",
    "percent%41 hash#x colon:y 'quote'",
    "all ?*[]{}%#:\\ ü",
]


@pytest.fixture(scope="module")
def savepoints(tmp_path_factory, acceptance_savepoint):
    root = tmp_path_factory.mktemp("odd")
    out = {}
    for name in NAMES:  # a savepoint is relocatable: copies of the acceptance savepoint
        path = root / name / "sp"
        shutil.copytree(acceptance_savepoint, path)
        out[name] = path
    return out


def _keys(df) -> list[int]:
    return sorted(r["key"] for r in df.select("key").collect())


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("engine", ["parquet", "statekit"])
def test_keyed_and_timers_read_in_full(spark, savepoints, name, engine):
    reader = SavepointReader.read(spark, str(savepoints[name]))
    assert _keys(reader.read_keyed_state("proc", engine=engine)) == [1, 2, 3]
    assert reader.read_keyed_state("proc", engine=engine).filter("key = 2").collect()[0]["count"] == 20
    assert len(reader.read_timers("proc", engine=engine).collect()) == 6
    assert sorted(r["value"] for r in reader.read_list_state("src", "buffer").collect()) == [1, 2, 3]


@pytest.mark.parametrize("name", NAMES)
def test_register_and_sql(spark, savepoints, name):
    SavepointReader.read(spark, str(savepoints[name])).register("odd")
    assert spark.sql("SELECT count(*) AS n FROM odd_proc.keyed").collect()[0]["n"] == 3
    assert spark.sql("SELECT count FROM odd_proc.keyed WHERE key = 3").collect()[0]["count"] == 30
    assert spark.sql("SELECT count(*) AS n FROM odd_proc.timers").collect()[0]["n"] == 6
