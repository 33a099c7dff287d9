"""Spark reads a POJO-keyed savepoint (stored key groups, converted from the Flink corpus) without pruning by statekit's
hash - the key class's hashCode() placed those keys - so key filters find every key; `engine="parquet"` falls back."""

from __future__ import annotations

from pathlib import Path

import pytest

from statekit.savepoint.convert import convert_to_statekit
from statekit.spark import SavepointReader

pytestmark = pytest.mark.spark

POJO = Path(__file__).resolve().parents[1] / "fixtures" / "flink" / "2.3.0" / "pojo-hashmap-canonical" / "savepoint"


@pytest.mark.parametrize("engine", ["auto", "parquet", "statekit"])
def test_key_filters_find_pojo_keys(spark, tmp_path, engine):
    sk = convert_to_statekit(POJO, tmp_path / "sk")
    for source in (sk, POJO):
        df = SavepointReader.read(spark, str(source)).read_keyed_state("counter", engine=engine)
        assert df.count() == 10
        rows = df.where("key = named_struct('id', -7, 'name', 'bob')").collect()
        assert [(r.key.name, r["count"]) for r in rows] == [("bob", 9)]
