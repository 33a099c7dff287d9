"""Every case of every Flink version's corpus (1.18-2.3) reads to exactly its expected.json through Spark too.

One shared Spark session (tests/conftest.py). Each table is one read through statekit's Python data source, a
few Python worker round trips each, so the lines of the Flink suite's every-run set (1.20 LTS, the 2.0 and 2.3
boundaries) run by default and the others are marked `every_version` (`make test-versions`), as in tests/flink/test_versions_restore.py.
"""

from __future__ import annotations

import pytest

from statekit.errors import CorruptSavepointError
from statekit.spark import SavepointReader

from .conftest import VERSION_CASES, cell, expected, savepoint
from .test_corpus import FLINK_34063, KYRO_LIKE, _norm_key, _norm_state

pytestmark = pytest.mark.spark
FAST = ("1.20.", "2.0.", "2.3.")
CASES = [pytest.param(v, c, marks=() if v.startswith(FAST) else pytest.mark.every_version) for v, c in VERSION_CASES]


@pytest.mark.parametrize("version,case", CASES)
def test_corpus_case_reads_exactly_through_spark(spark, version, case, compat):
    compat(version, "read (Spark)", *cell(case))
    exp = expected(case, version)
    reader = SavepointReader.read(spark, str(savepoint(case, version)))
    refused = 0
    for uid, op in exp["operators"].items():
        if op["kind"] == "keyed":
            _check_keyed(reader, uid, op)
        elif op["kind"] == "operator":
            for name, st in op["operator_states"].items():
                try:
                    _check_operator_state(reader, uid, name, st)
                except Exception as exc:  # Spark wraps the task's error; only FLINK-34063's refusal is expected
                    if (version, case) not in FLINK_34063 or "FLINK-34063" not in str(exc):
                        raise
                    refused += 1
    assert (refused > 0) == ((version, case) in FLINK_34063)


def _check_keyed(reader, uid: str, op: dict) -> None:
    rows = [r.asDict(recursive=True) for r in reader.read_keyed_state(uid).collect()]
    assert len(rows) == len(op["keys"]), "every key exactly once"
    by_key = {repr(_norm_key(r["key"], op["key_type"])): r for r in rows}
    assert len(by_key) == len(rows)
    for e in op["keys"]:
        r = by_key[repr(e["key"])]
        for name in (n for n in op["states"] if not n.endswith("_timers")):
            if name in KYRO_LIKE:  # Kryo: raw bytes, the tag visible in them
                assert isinstance(r[name], (bytes, bytearray)) and e[name]["tag"][:-1].encode() in r[name]
            else:
                assert _norm_state(name, r[name]) == e[name], (e["key"], name)
    if "event_timers" in op["states"]:
        got = sorted((repr(_norm_key(t["key"], op["key_type"])), t["domain"], t["timestamp"])
                     for t in (r.asDict(recursive=True) for r in reader.read_timers(uid).collect()))
        want = sorted((repr(e["key"]), domain, ts) for e in op["keys"]
                      for domain in ("event", "processing") for ts in e[f"{domain}_timers"])
        assert got == want


def _check_operator_state(reader, uid: str, name: str, st: dict) -> None:
    if st["mode"] == "BROADCAST":
        assert {r.key: r.value for r in reader.read_broadcast_state(uid, name).collect()} == st["entries"]
    elif st["mode"] == "UNION":
        got = [r.value for r in reader.read_union_state(uid, name).orderBy("idx").collect()]
        assert got == [v for sub in st["per_subtask"] for v in sub]
    else:
        rows = reader.read_list_state(uid, name).orderBy("subtask", "idx").collect()
        assert [[r.value for r in rows if r.subtask == s] for s in range(len(st["per_subtask"]))] == st["per_subtask"]


def test_flink_34063_is_refused_through_spark_by_name(spark):
    """Flink 1.18.1's snappy operator state (stale offsets): a named refusal, never the first element repeated."""
    (version, case), = FLINK_34063
    reader = SavepointReader.read(spark, str(savepoint(case, version)))
    with pytest.raises(Exception, match="FLINK-34063") as e:
        reader.read_list_state("buffer", "buffered").collect()
    assert isinstance(e.value, CorruptSavepointError) or "CorruptSavepointError" in str(e.value)
