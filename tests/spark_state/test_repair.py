"""Repairs of Spark streaming checkpoints (set, delete-key, rm-state) written as a new batch; real Spark 4.1.0 restarts.

Without a JVM: the edited state reads back exactly, every ``.crc`` verifies, the new batch's offset and
commit entries are there, the source is untouched, bad edits write nothing, and statekit's UnsafeRow
encoder gives back the exact bytes Spark stored for every key and value of the corpus (so a key set
anew is the key Spark looks up). With real Spark (`spark`): the query restarted on the repaired
checkpoint with the generator's second input produces exactly the model's outputs and final state
computed from the edited state: a set key continues from the set value, a deleted key starts over,
a key set anew is found by Spark.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import streaming_harness as H
from spark_corpus import CASES, case_dir, copy_case, expected

from statekit.errors import InvalidArgumentError, SavepointExistsError, StatekitError
from statekit.format.spark.errors import RunningQueryError
from statekit.format.spark.unsaferow import row_decoder, row_encoder
from statekit.savepoint.patch import DeleteKeys, RemoveState, RenameOperator, SetValue, repair
from statekit.savepoint.spark_checkpoint import SparkCheckpoint
from statekit.savepoint.spark_tools import check_checkpoint
from statekit.testing import tree_digest

US = 1_000_000
A, D, C = {"k": "a", "n": 1}, {"k": "d", "n": 2}, {"k": "c", "n": 8}
WA = {"window": {"start": 160 * US, "end": 170 * US}, "k": "a"}
WC = {"window": {"start": 160 * US, "end": 170 * US}, "k": "c"}
WZ = {"window": {"start": 170 * US, "end": 180 * US}, "k": "z"}

#: per query: the edits, and the same edits on the generator's model state
EDITS = {
    "agg": [SetValue(0, A, None, {"count": 100, "sum": 1000, "max": 50}),
            SetValue(0, D, None, {"count": 10, "sum": 20, "max": 9}),  # no state yet: a new key
            DeleteKeys(0, (C,))],
    "window_agg": [SetValue(0, WA, None, {"count": 100, "sum": 1000}), DeleteKeys(0, (WC,)),
                   SetValue(0, WZ, "default", {"count": 5, "sum": 50})],
    # the left side of join key 🙂 replaced by one row at 168 s: run 2's right row (🙂, 171 s) joins it
    "join": [SetValue(0, "🙂", "left", [{"lk": "🙂", "lt": 168 * US, "lv": 42}])],
    # ü-straße's list replaced, one map entry of it set anew, a list for a key with no state at all
    "tws": [SetValue(0, "ü-straße", "seen", [{"n": 5, "t": 100}, {"n": None, "t": 7}]),
            SetValue(0, {"k": "ü-straße", "n": 77}, "by_n", {"v_sum": 9}),
            SetValue(0, "brand-new", "seen", [{"n": 1, "t": 2}])],
}


def _edit_model(name: str, m) -> None:
    if name == "agg":
        m.state[("a", 1)] = (100, 1000, 50)
        m.state[("d", 2)] = (10, 20, 9)
        del m.state[("c", 8)]
    elif name == "window_agg":
        m.state[(160, 170, "a")] = (100, 1000)
        del m.state[(160, 170, "c")]
        m.state[(170, 180, "z")] = (5, 50)
    elif name == "join":
        m.state["left"]["🙂"] = [[{"lk": "🙂", "lt": 168, "lv": 42}, False]]
    else:
        m.lists["ü-straße"] = [(5, 100), (None, 7)]
        m.maps["ü-straße"][77] = 9
        m.lists["brand-new"] = [(1, 2)]


def _rows(sp: SparkCheckpoint, store: str = "default") -> list[str]:
    return sorted(json.dumps({k: v for k, v in r.items() if k != "partition_id"}, default=str, sort_keys=True)
                  for r in sp.keyed_table(0, store=store).to_pylist())


PLAIN = [c for c in CASES if c.split("-")[0] in ("agg", "window_agg", "dedup", "pandas_state")]


@pytest.mark.parametrize("case", PLAIN)
def test_encoder_gives_sparks_bytes_for_every_stored_row(case):
    sp = SparkCheckpoint.open(case_dir(case) / "checkpoint")
    shape = sp.shape(0)
    skip = 1 if sp.provider == "rocksdb" else 0
    n = 0
    for p in range(sp.spark_operators[0].num_partitions):
        for k, v in sp.load(0, p, "default").entries.items():
            for raw, schema in ((k, shape.key), (v, shape.value)):
                row = row_decoder(schema)(raw, skip, len(raw) - skip)
                assert row_encoder(schema)(row) == raw[skip:], (case, row)
                n += 1
    assert n > 0


@pytest.mark.parametrize("case", ["agg-hdfs", "agg-rocksdb", "agg-rocksdb_changelog", "window_agg-hdfs",
                                  "window_agg-rocksdb", "window_agg-rocksdb_changelog"])
def test_repair_writes_a_new_batch_with_the_edited_state(tmp_path, case):
    name = case.split("-")[0]
    src = copy_case(case, tmp_path)
    before = tree_digest(src)
    old = SparkCheckpoint.open(src)
    plan = repair(src, tmp_path / "out", EDITS[name])
    assert plan.written and len(plan.changes) == 3
    assert tree_digest(src) == before  # the source is untouched (its unchanged state files are only linked)
    new = SparkCheckpoint.open(tmp_path / "out")
    assert new.batch == old.batch + 1
    assert (tmp_path / "out" / "offsets" / str(new.batch)).is_file()
    # the new batch repeats the last one's source offsets: no input is skipped or read twice
    assert new.layout.offsets(new.batch)[1] == old.layout.offsets(old.batch)[1]
    assert check_checkpoint(new).ok  # every state file, .crc side file and row of the new version
    rows = {json.dumps({k: v for k, v in r.items() if k != "partition_id"}, default=str, sort_keys=True)
            for r in new.keyed_table(0).to_pylist()}
    if name == "agg":
        assert new.get(0, A)[0]["count"] == 100 and new.get(0, D)[0]["sum"] == 20 and not new.get(0, C)
    else:
        assert new.get(0, WA)[0]["count"] == 100 and new.get(0, WZ)[0]["sum"] == 50 and not new.get(0, WC)
    assert len(rows) == old.keyed_table(0).num_rows  # one set, one new, one deleted
    # every other key is exactly as before; the earlier batch still reads as it was
    assert _rows(new.at_batch(old.batch)) == _rows(old)


def test_tws_and_join_delete_key_and_rm_state(tmp_path):
    tws = copy_case("tws-rocksdb_changelog", tmp_path)
    old = SparkCheckpoint.open(tws)
    key = old.keyed_table(0, store="count").to_pylist()[0]["k"]
    plan = repair(tws, tmp_path / "tws-out", [DeleteKeys(0, (key,)), RemoveState(0, "by_n"),
                                              SetValue(0, "zz-new", "count", 7)])
    new = SparkCheckpoint.open(tmp_path / "tws-out")
    assert plan.written and check_checkpoint(new).ok
    for store in ("count", "seen", "$timers"):
        assert not new.get(0, key, store=store) and old.get(0, key, store=store)
    assert new.keyed_table(0, store="by_n").num_rows == 0 < old.keyed_table(0, store="by_n").num_rows
    assert [r["count"] for r in new.get(0, "zz-new", store="count")] == [7]

    join = copy_case("join-hdfs", tmp_path)
    jold = SparkCheckpoint.open(join)
    jkey = jold.keyed_table(0, store="left-keyToNumValues").to_pylist()[0]["field0"]
    repair(join, tmp_path / "join-out", [DeleteKeys(0, (jkey,))])
    jnew = SparkCheckpoint.open(tmp_path / "join-out")
    for s in jold.tables(0):
        assert not jnew.get(0, jkey, store=s)
    with pytest.raises(InvalidArgumentError, match="remove all of them"):
        repair(join, tmp_path / "join-out2", [RemoveState(0, "left-keyToNumValues")])
    with pytest.raises(InvalidArgumentError, match="keyToNumValues"):  # a count alone is ambiguous
        repair(join, tmp_path / "join-out2", [SetValue(0, jkey, "left-keyToNumValues", 1)])
    assert not (tmp_path / "join-out2").exists()


@pytest.mark.parametrize("case", ["tws-rocksdb", "tws-rocksdb_changelog", "join-hdfs", "join-rocksdb",
                                  "join-rocksdb_changelog"])
def test_set_on_lists_maps_and_join_sides(tmp_path, case):
    src = copy_case(case, tmp_path)
    before = tree_digest(src)
    old = SparkCheckpoint.open(src)
    name = case.split("-")[0]
    plan = repair(src, tmp_path / "out", EDITS[name])
    new = SparkCheckpoint.open(tmp_path / "out")
    assert plan.written and check_checkpoint(new).ok and new.batch == old.batch + 1 and tree_digest(src) == before
    if name == "tws":
        assert [(r["n"], r["t"]) for r in new.get(0, "ü-straße", store="seen")] == [(5, 100), (None, 7)]
        assert {r["n"]: r["v_sum"] for r in new.get(0, "ü-straße", store="by_n")} == \
            {**{r["n"]: r["v_sum"] for r in old.get(0, "ü-straße", store="by_n")}, 77: 9}
        assert [(r["n"], r["t"]) for r in new.get(0, "brand-new", store="seen")] == [(1, 2)]
        # the list's element counter (Spark's $rowCounter_seen family) follows the list
        part = new.partition_of(0, "brand-new")
        data = new.load(0, part, "default")
        counter = data.column_families["$rowCounter_seen"].to_bytes(2, "little", signed=True)
        assert any(k.startswith(counter) and v.endswith((1).to_bytes(8, "little")) for k, v in data.entries.items())
        # the copy names its own schema files (the corpus's metadata names the generator's absolute paths)
        for f in (tmp_path / "out" / "state" / "0" / "_metadata" / "v2").iterdir():
            for st in json.loads(f.read_text().split("\n")[1])["stateStoreInfo"]:
                assert st["stateSchemaFilePaths"] and all(
                    p.startswith(f"file:{(tmp_path / 'out').resolve()}/state/0/_stateSchema/") and
                    Path(p[5:]).is_file() for p in st["stateSchemaFilePaths"])
        changed = {"seen", "by_n"}
    else:
        rows = new.get(0, "🙂", store="left-keyWithIndexToValue")
        assert [(r["index"], r["lv"], r["matched"]) for r in rows] == [(0, 42, False)]
        assert [r["value"] for r in new.get(0, "🙂", store="left-keyToNumValues")] == [1]
        changed = {"left-keyWithIndexToValue", "left-keyToNumValues"}
    for store in set(old.tables(0)) - changed:  # every other table exactly as before
        assert _rows(new, store) == _rows(old, store)
    edited = {"ü-straße", "🙂", "brand-new"}

    def others(sp, store):
        return [r for r in _rows(sp, store) if json.loads(r).get("k", json.loads(r).get("field0")) not in edited]
    for store in changed:  # and in the changed ones, every other key
        assert others(new, store) == others(old, store)
    # [] empties a side / a list; bad shapes are refused with the fields named, nothing written
    if name == "join":
        plan = repair(src, tmp_path / "out2", [SetValue(0, "🙂", "left-keyWithIndexToValue", [])])
        gone = SparkCheckpoint.open(tmp_path / "out2")
        assert not gone.get(0, "🙂", store="left-keyWithIndexToValue") and not gone.get(0, "🙂", store="left-keyToNumValues")
        with pytest.raises(InvalidArgumentError, match=r"\['lk', 'lt', 'lv'\]"):
            repair(src, tmp_path / "bad", [SetValue(0, "🙂", "left", {"lk": "🙂", "lt": 1, "lv": 1})])
        with pytest.raises(InvalidArgumentError, match="every field"):
            repair(src, tmp_path / "bad", [SetValue(0, "🙂", "right", [{"rk": "🙂"}])])
    else:
        with pytest.raises(InvalidArgumentError, match=r"\['n', 't'\]"):
            repair(src, tmp_path / "bad", [SetValue(0, "ü-straße", "seen", {"n": 1, "t": 2})])
        with pytest.raises(InvalidArgumentError, match=r"map key's fields \['n'\]"):
            repair(src, tmp_path / "bad", [SetValue(0, "ü-straße", "by_n", {"v_sum": 1})])
    assert not (tmp_path / "bad").exists()


def test_bad_repairs_write_nothing(tmp_path):
    src = copy_case("agg-hdfs", tmp_path)
    out = tmp_path / "out"
    with pytest.raises(InvalidArgumentError, match="every field"):
        repair(src, out, [SetValue(0, D, None, {"count": 1})])  # a new key needs its whole value
    with pytest.raises(InvalidArgumentError, match="no field"):
        repair(src, out, [SetValue(0, A, None, {"cnt": 1})])
    with pytest.raises(InvalidArgumentError, match="fields"):
        repair(src, out, [SetValue(0, {"k": "a"}, None, {"count": 1})])
    with pytest.raises(InvalidArgumentError, match="types"):
        repair(src, out, [SetValue(0, A, None, {"count": "many"})])
    with pytest.raises(InvalidArgumentError, match="repartition"):
        repair(src, out, [RenameOperator("0", "1")])
    with pytest.raises(StatekitError):
        repair(src, out, [SetValue(7, A, None, {"count": 1})])
    # a plan that changes nothing writes nothing; a dry run neither
    plan = repair(src, out, [SetValue(0, A, None, {"count": 4}), DeleteKeys(0, ({"k": "zz", "n": 0},))])
    assert not plan.changes and len(plan.noops) == 2 and not out.exists()
    assert repair(src, out, EDITS["agg"], dry_run=True).changes and not out.exists()
    out.mkdir()
    with pytest.raises(SavepointExistsError):
        repair(src, out, EDITS["agg"])
    # a running query: offsets/<b+1> without commits/<b+1>
    shutil.copyfile(src / "offsets" / "2", src / "offsets" / "3")
    with pytest.raises(RunningQueryError):
        repair(src, tmp_path / "out2", EDITS["agg"])
    assert not (tmp_path / "out2").exists()
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # no staging left behind


def _restart(spark, tmp_path, case: str) -> None:
    import model

    exp = expected(case)
    name = case.split("-")[0]
    src_cp, src_in, out = tmp_path / "src" / "checkpoint", tmp_path / "src" / "input", tmp_path / "out"
    shutil.copytree(case_dir(case) / "checkpoint", src_cp)
    H.place_input(case_dir(case), exp, src_cp, src_in)
    repair(src_cp, out, EDITS[name])
    from test_repartition_spark import _results  # the pandas-UDF queries (tws) run in their own venv

    got = _results(spark, name, out, src_in, 4)

    events = model.JOIN if name == "join" else model.EVENTS
    m = model.MODELS[name]()
    m.run(events["run1"])
    assert m.sim.batch_id == exp["latest_batch_id"] + 1
    _edit_model(name, m)
    m.sim.batch_id += 1  # the repair's batch: no input
    m.sim.outputs = {}
    m.run(events["run2"])

    def key(v):
        return json.dumps(v, sort_keys=True, ensure_ascii=False)

    # the restarted query continued from the edited state, exactly as the model does
    assert got["outputs"] == {str(b): sorted(key(r) for r in rows) for b, rows in sorted(m.sim.outputs.items()) if rows}
    want = [(s, k, v) for s, rows in m.state_rows().items() for k, v, _ in rows]
    assert sorted(key([s, k, v]) for s, _, k, v in got["state_after"]) == sorted(key(list(w)) for w in want)
    last = max(int(p.name) for p in (out / "commits").iterdir() if p.name.isdigit())
    assert last == m.sim.batch_id - 1


@pytest.mark.spark
@pytest.mark.slow
@pytest.mark.parametrize("case", ["agg-hdfs", "join-hdfs"])
def test_repaired_checkpoint_restarts_with_the_edited_state(spark, tmp_path, case):
    _restart(spark, tmp_path, case)


@pytest.mark.spark
@pytest.mark.extended
@pytest.mark.parametrize("case", ["agg-rocksdb", "agg-rocksdb_changelog", "window_agg-hdfs", "window_agg-rocksdb",
                                  "window_agg-rocksdb_changelog", "join-rocksdb", "join-rocksdb_changelog",
                                  "tws-rocksdb", "tws-rocksdb_changelog"])
def test_every_provider_restarts_with_the_edited_state(spark, tmp_path, case):
    _restart(spark, tmp_path, case)


def test_cli_repairs_on_a_checkpoint(tmp_path):
    from typer.testing import CliRunner

    from statekit_cli.app import app

    def run(*args):
        r = CliRunner().invoke(app, [str(a) for a in args], env={"COLUMNS": "200"})
        if r.exception is not None and not isinstance(r.exception, SystemExit):
            raise r.exception
        return r.exit_code, r.stdout + r.stderr

    src = copy_case("agg-rocksdb", tmp_path)
    code, out = run("set", src, tmp_path / "a", "--uid", "0", "--key", '{"k": "a", "n": 1}', "--state", "default",
                    "--value", '{"count": 100}')
    assert code == 0 and "dry run" in out and '{"count": 4, "sum": 18, "max": 10} -> {"count": 100' in out
    assert not (tmp_path / "a").exists()
    code, out = run("set", src, tmp_path / "a", "--name", "stateStoreSave", "--key", '["a", 1]', "--state", "default",
                    "--value", '{"count": 100}', "--apply")
    assert code == 0 and "new batch 3" in out, out
    assert SparkCheckpoint.open(tmp_path / "a").get(0, A)[0]["count"] == 100
    code, out = run("delete-key", tmp_path / "a", tmp_path / "b", "--key", '{"k": "c", "n": 8}', "--apply")
    assert code == 0 and "1 entries" in out
    b = SparkCheckpoint.open(tmp_path / "b")
    assert b.batch == 4 and not b.get(0, C) and b.get(0, A)[0]["count"] == 100
    code, out = run("rm-state", tmp_path / "b", tmp_path / "c", "--uid", "0", "--state", "default", "--apply")
    assert code == 0 and SparkCheckpoint.open(tmp_path / "c").keyed_table(0).num_rows == 0
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps([{"edit": "set", "uid": 0, "key": A, "value": {"sum": 1}},
                                {"edit": "delete-key", "name": "stateStoreSave", "keys": [D, C]}]))
    code, out = run("repair", src, tmp_path / "d", "--plan", plan, "--apply")
    d = SparkCheckpoint.open(tmp_path / "d")
    assert code == 0 and d.get(0, A)[0]["sum"] == 1 and not d.get(0, C), out
    assert "no change" in out  # D has no state
    # a list variable's whole list and a join side's rows, given as JSON arrays
    tws = copy_case("tws-rocksdb", tmp_path)
    code, out = run("set", tws, tmp_path / "e", "--uid", "0", "--state", "seen", "--key", '"ü-straße"',
                    "--value", '[{"n": 5, "t": 100}]', "--apply")
    assert code == 0 and "3 elements -> 1" in out, out
    assert [(r["n"], r["t"]) for r in SparkCheckpoint.open(tmp_path / "e").get(0, "ü-straße", store="seen")] == [(5, 100)]
    join = copy_case("join-hdfs", tmp_path)
    code, out = run("set", join, tmp_path / "f", "--uid", "0", "--state", "left-keyToNumValues", "--key", '"🙂"',
                    "--value", "2", "--apply")
    assert code != 0 and "keyWithIndexToValue" in out and not (tmp_path / "f").exists()
