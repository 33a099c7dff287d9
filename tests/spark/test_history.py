"""SavepointReader.export (Delta, Parquet) and append_state_history: keyed state over savepoints, compared with Delta time travel."""

from __future__ import annotations

import pyarrow as pa
import pytest

from statekit.errors import OutputExistsError
from statekit.savepoint import Savepoint, SavepointBuilder
from statekit.spark import SavepointReader, append_state_history
from statekit.state import ListStateDescriptor, ValueStateDescriptor
from statekit.state.descriptors import OperatorStateInfo

pytestmark = pytest.mark.spark


def _savepoint(path, checkpoint_id, counts, *, with_tags=False):
    states = [ValueStateDescriptor("count", "bigint")] + ([ListStateDescriptor("tags", "string")] if with_tags else [])
    with SavepointBuilder(path, checkpoint_id=checkpoint_id) as b:
        cols = {"key": list(counts), "count": list(counts.values())}
        if with_tags:
            cols["tags"] = [["t"]] * len(counts)
        b.add_operator("counter", key_type="string", keyed_states=states).write_keyed(pa.table(cols))
        b.add_operator("src").write_list_state(OperatorStateInfo("offsets", "split", "bigint"), [[7, 8]])
    return path


def test_history_over_three_savepoints_with_time_travel(spark, tmp_path):
    sps = [
        _savepoint(tmp_path / "sp1", 1, {"a": 1, "b": 2}),
        _savepoint(tmp_path / "sp2", 2, {"a": 3, "b": 2, "c": 1}),
        _savepoint(tmp_path / "sp3", 3, {"a": 5, "c": 1}, with_tags=True),  # b gone, a state added
    ]
    hist = tmp_path / "history"
    for sp in sps:
        assert append_state_history(sp, hist, spark=spark) == {"counter": len(Savepoint.open(sp).keyed_table("counter"))}
    table = str(hist / "counter")
    df = spark.read.format("delta").load(table)
    assert df.columns == ["checkpoint_id", "savepoint", "key", "count", "tags"]  # the added state merged in
    got = {(r.checkpoint_id, r.key): r["count"] for r in df.collect()}
    assert got == {(1, "a"): 1, (1, "b"): 2, (2, "a"): 3, (2, "b"): 2, (2, "c"): 1, (3, "a"): 5, (3, "c"): 1}
    # Delta time travel: version 1 is the history after the second savepoint
    v1 = spark.read.format("delta").option("versionAsOf", 1).load(table)
    assert sorted({r.checkpoint_id for r in v1.collect()}) == [1, 2]
    # the same checkpoint twice: refused, nothing appended
    with pytest.raises(OutputExistsError, match="already holds checkpoint 2"):
        append_state_history(sps[1], hist, spark=spark)
    assert spark.read.format("delta").load(table).count() == 7
    assert spark.sql(f"DESCRIBE HISTORY delta.`{table}`").count() == 3


@pytest.mark.parametrize("fmt", ["delta", "parquet"])
def test_export_writes_every_table(spark, tmp_path, fmt):
    sp = _savepoint(tmp_path / "sp", 1, {"a": 1, "b": 2})
    reader = SavepointReader.read(spark, sp)
    written = reader.export(tmp_path / "out", format=fmt)
    assert written == {"counter/keyed": 2, "counter/timers": 0, "src/offsets": 2}
    keyed = spark.read.format(fmt).load(str(tmp_path / "out" / "counter" / "keyed"))
    assert {r.key: r["count"] for r in keyed.collect()} == {"a": 1, "b": 2}
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # no staging left
    with pytest.raises(OutputExistsError):
        reader.export(tmp_path / "out", format=fmt)
