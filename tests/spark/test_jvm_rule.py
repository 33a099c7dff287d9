"""statekit's Catalyst rule: compiled from source with javac, installed once, and a clean fallback without it."""

from __future__ import annotations

import pytest

import statekit.spark.pruning as pruning
from statekit.spark import SavepointReader

pytestmark = pytest.mark.spark


def test_the_rule_compiles_from_source_into_the_cache(spark, tmp_path, monkeypatch):
    monkeypatch.setenv("STATEKIT_CACHE_DIR", str(tmp_path))
    classes = pruning.compiled_classes(spark.version)
    assert classes.is_relative_to(tmp_path)
    assert (classes / "io" / "statekit" / "spark" / "KeyGroupPruning.class").exists()
    assert pruning.compiled_classes(spark.version) == classes  # cached: no second build
    assert not list(classes.parent.glob(".build-*"))  # the staging directory is gone


def test_without_a_jdk_compiling_says_why(spark, tmp_path, monkeypatch):
    monkeypatch.setenv("STATEKIT_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("JAVA_HOME", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(RuntimeError, match="javac"):
        pruning.compiled_classes(spark.version)


def test_the_rule_is_installed_once(spark):
    assert pruning.install_pruning(spark)
    assert pruning.install_pruning(spark)
    names = [r.getClass().getName() for r in _scala_list(spark._jsparkSession.experimental().extraOptimizations())]
    assert names.count(pruning.RULE_CLASS) == 1


def test_without_the_rule_keyed_tables_read_through_the_data_source(spark, acceptance_savepoint, monkeypatch):
    key = id(spark._jsparkSession)
    installed = pruning._sessions.pop(key)
    loaders = dict(pruning._loaders)
    pruning._loaders.clear()

    def no_jdk(version):
        raise RuntimeError("no javac on PATH or in $JAVA_HOME")

    monkeypatch.setattr(pruning, "compiled_classes", no_jdk)
    try:
        reader = SavepointReader.read(spark, acceptance_savepoint)
        with pytest.warns(RuntimeWarning, match="Python data source"):
            df = reader.read_keyed_state("proc")
        assert "BatchScan statekit" in df._jdf.queryExecution().executedPlan().toString()
        assert df.where("key = 2").select("count").collect()[0][0] == 20
        assert not pruning.install_pruning(spark)  # the reason is remembered: one warning only
    finally:
        pruning._sessions[key] = installed
        pruning._loaders.update(loaders)
    assert "FileScan parquet" in SavepointReader.read(spark, acceptance_savepoint).read_keyed_state(
        "proc")._jdf.queryExecution().executedPlan().toString()  # fmt: skip


def _scala_list(seq):
    it = seq.iterator()
    out = []
    while it.hasNext():
        out.append(it.next())
    return out
