"""Flink 1.20 savepoints into the Flink 2.3 build of the same job: refused or restored directly, and after `upgrade`.

The pairs (tests/fixtures/flink/upgrade, made by make_upgrade_pairs.py with real Flink 1.20): a Kryo class with
nested fields, collections, an enum, a boxed Double and nulls (`profiles/profile`); a List and a Map declared with
a TypeHint, which 1.20 serializes with Kryo and 2.x with its built-in (Nullable) List/Map serializers
(`lists/recent`, `lists/totals`); a ListState and a MapState of the Kryo class (`history/visits`, `history/by_tag`); a Long and a plain two-field
Kryo class (`simple`); and a Flink 1.20 Scala API
job's case class with an Option field and an Option[Long] (`readings`), for which the 2.3 job declares a POJO and
a Long. All restores of one test run in one JVM.
"""

from __future__ import annotations

import json

import pytest
import upgrade_jobs

from statekit.savepoint.upgrade import upgrade

from .conftest import FIXTURES
from .test_repair_restore import _spec

pytestmark = pytest.mark.flink

PAIRS = FIXTURES / "upgrade"
JAVA = ["profiles", "lists", "simple", "history"]


def _expected(case: str) -> dict:
    return json.loads((PAIRS / case / "expected.json").read_text())["operators"]


@pytest.mark.slow  # the finding behind `upgrade` (issue 28 part 3, step 1); ~35 s
def test_what_flink_2_3_does_with_the_1_20_savepoints_directly(flink_line):
    flink_line("2.3")
    sp, scala = PAIRS / "hashmap-1.20" / "savepoint", PAIRS / "scala-hashmap-1.20" / "savepoint"
    profiles, lists, simple, rocks, readings, history = upgrade_jobs.restore([
        (sp, ["profiles"], "hashmap"), (sp, ["lists"], "hashmap"), (sp, ["simple"], "hashmap"),
        (PAIRS / "rocksdb-1.20" / "savepoint", ["profiles"], "rocksdb"), (scala, ["readings"], "hashmap"),
        (sp, ["history"], "hashmap")])
    # the Kryo class: Kryo 5 misreads Kryo 2's bytes (refused on the heap restore, on first access with RocksDB)
    assert isinstance(profiles, str) and "KryoException" in profiles and "Profile" in profiles, profiles
    assert isinstance(rocks, str) and "KryoException" in rocks and "Profile" in rocks, rocks
    assert isinstance(history, str) and "KryoException" in history, history
    # List/Map: Kryo in 1.20, a built-in serializer in 2.x, which Flink refuses to migrate to
    assert isinstance(lists, str) and "StateMigrationException" in lists and "NullableSerializer" in lists, lists
    # the Scala API's serializer snapshots are gone from 2.x
    assert isinstance(readings, str) and "ClassNotFoundException: org.apache.flink.api.scala.typeutils" in readings
    # a Long and a plain Kryo class restore directly, every value equal
    assert simple == {"simple": _expected("hashmap-1.20")["simple"]}


def test_upgraded_savepoints_restore_in_flink_2_3_with_every_value_equal(flink_line, tmp_path, compat):
    flink_line("2.3")
    for backend in ("hashmap", "rocksdb"):
        compat("1.20", "upgrade", backend, "canonical savepoint")
    cp1, cp2 = [PAIRS / "classes-1.20.jar"], [PAIRS / "classes-2.3.jar"]
    up = {}
    for case in ("hashmap-1.20", "rocksdb-1.20"):
        upgrade(PAIRS / case / "savepoint", tmp_path / case, to_flink="2.3", classpath=cp1)
        up[case] = tmp_path / case
    report = upgrade(PAIRS / "scala-hashmap-1.20" / "savepoint", tmp_path / "scala", to_flink="2.3",
                     classpath=[PAIRS / "scala-classes-1.20.jar"], target_classpath=cp2,
                     pojos={"readings/reading": "statekit.upgrade.UpgradeModel$Reading"})
    assert {s.state: s.action for s in report.states} == {"reading": "migrated", "last": "migrated"}
    # the job's own Kryo serializer: refused unless kept on the user's word; then 2.3 reads it with that serializer
    upgrade(PAIRS / "custom-kryo-1.20" / "savepoint", tmp_path / "custom", to_flink="2.3", classpath=cp1,
            keep=["simple/simple"])
    got = upgrade_jobs.restore([
        (up["hashmap-1.20"], JAVA, "hashmap"), (up["hashmap-1.20"], JAVA, "rocksdb"),
        (up["rocksdb-1.20"], JAVA, "rocksdb"), (tmp_path / "scala", ["readings"], "hashmap"),
        (tmp_path / "custom", JAVA, "hashmap")])
    for r in got:
        assert not isinstance(r, str), r
    assert got[0] == got[1] == _expected("hashmap-1.20")
    assert got[2] == _expected("rocksdb-1.20")
    want = _expected("scala-hashmap-1.20")
    # Option[Long] None is a state not set in the 2.x job's ValueState<Long>
    for values in want["readings"].values():
        if values["last"] is None:
            del values["last"]
    assert got[3] == want
    assert got[4] == _expected("custom-kryo-1.20")


def test_the_corpus_job_that_flink_restores_directly_still_restores_after_upgrade(flink_line, tmp_path, compat):
    """The 1.20 corpus job (keyed value/list/map state with timers, POJO, Tuple, Row, a plain Kryo class, operator
    list/union and broadcast state): Flink 2.3 restores its 1.20 savepoint directly; after `upgrade` the 2.3 job
    sees exactly the same."""
    compat("1.20", "upgrade", "hashmap", "canonical savepoint")
    flink = flink_line("2.3")
    flink_line("1.20")  # the 1.x job's classes: what a user passes as --classpath
    src = FIXTURES / "1.20.5" / "long-hashmap-canonical" / "savepoint"
    report = upgrade(src, tmp_path / "up", to_flink="2.3",
                     classpath=[flink.build_dir("1.20") / "target" / "classes"], uids=["counter", "types"])
    kryo = next(s for s in report.states if s.state == "v_kryo")
    assert kryo.action == "kept" and "the 2.x bytes are the same" in kryo.how
    spec = _spec(job_max=None, counter_max=None, counter_uid="counter", counter_key="bigint")
    direct, upgraded = flink.restore_many([(src, spec), (tmp_path / "up", spec)], version="2.3")
    assert not isinstance(direct, str) and not isinstance(upgraded, str), (direct, upgraded)
    for r in (direct, upgraded):  # a union state's elements arrive in the order of the subtasks' handles
        r.operator["buffer"]["seen"] = {i: sorted(v) for i, v in r.operator["buffer"]["seen"].items()}
    assert upgraded == direct
    assert upgraded.keyed["types"] and upgraded.timers["counter"]
