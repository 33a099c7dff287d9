"""Generate the golden savepoint ``tests/golden/v1/`` (format version 1). Run on purpose only.

    .venv/bin/python tests/golden/make_golden.py

The golden savepoint pins the on-disk format: `tests/savepoint/test_golden.py` reads the committed
copy and compares it with hard-coded expected content. Do not regenerate it to make that test
pass: a change of the format is a new format version (``tests/golden/v2/`` from a new script,
v1 kept) plus a migration, never silent drift. The script refuses to overwrite an existing
directory; delete it by hand only when you really mean to re-create the same version (for
example after adding a state kind that v1 already defines but the golden copy lacked).

Every state kind appears: keyed value/list/map/reducing/aggregating state, a window operator
with a namespace, event and processing timers, operator list (split) and union state, and
broadcast state. The creation time is fixed so that a re-run produces the same manifest.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pyarrow as pa

HERE = Path(__file__).resolve().parent
TARGET = HERE / "v1"
CREATED_AT = "2026-01-01T00:00:00.000Z"
WINDOW = "struct<start:bigint,end:bigint>"


def build(target: Path) -> Path:
    from unittest import mock

    from statekit.savepoint import SavepointBuilder
    from statekit.savepoint import writer as writer_module
    from statekit.state import (
        AggregateFunction,
        AggregatingStateDescriptor,
        BroadcastStateDescriptor,
        ListStateDescriptor,
        MapStateDescriptor,
        ReducingStateDescriptor,
        ValueStateDescriptor,
        operator_list_info,
    )

    class Average(AggregateFunction):
        def create_accumulator(self):
            return {"sum": 0, "count": 0}

        def add(self, value, acc):
            return {"sum": acc["sum"] + value, "count": acc["count"] + 1}

        def get_result(self, acc):
            return acc["sum"] / acc["count"]

    counter_states = [
        ValueStateDescriptor("count", "bigint"),
        ListStateDescriptor("history", "string"),
        MapStateDescriptor("tags", "string", "double"),
        ReducingStateDescriptor("total", lambda a, b: a + b, "bigint"),
        AggregatingStateDescriptor("avg", Average(), "struct<sum:bigint,count:bigint>"),
    ]
    counter_schema = pa.schema([("key", pa.int64())] + [(s.name, s.column_type) for s in counter_states])
    counter_rows = [
        {"key": 1, "count": 10, "history": ["a", "b"], "tags": [("x", 1.5)], "total": 100,
         "avg": {"sum": 30, "count": 3}},
        {"key": -1, "count": None, "history": [], "tags": [], "total": None, "avg": None},
        {"key": 1 << 40, "count": 0, "history": None, "tags": None, "total": -5, "avg": {"sum": 0, "count": 0}},
        {"key": -(2**63), "count": -(2**63), "history": ["😀", ""], "tags": [("é", -0.5), ("", 0.0)],
         "total": 2**63 - 1, "avg": None},
        {"key": 2**63 - 1, "count": 2**63 - 1, "history": ["z"], "tags": [("k", None)], "total": 0,
         "avg": {"sum": -7, "count": 1}},
        {"key": 42, "count": 42, "history": None, "tags": None, "total": None, "avg": None},
    ]
    w1, w2 = {"start": 0, "end": 60_000}, {"start": 60_000, "end": 120_000}

    with mock.patch.object(writer_module, "iso_now", lambda: CREATED_AT), \
            SavepointBuilder(target, checkpoint_id=17, job_name="golden-v1", rows_per_file=2) as b:
        counter = b.add_operator("counter", name="Counter", parallelism=2, max_parallelism=128, key_type="bigint",
                                 keyed_states=counter_states)
        counter.write_keyed(pa.Table.from_pylist(counter_rows, schema=counter_schema))

        window = b.add_operator("session-window", parallelism=1, max_parallelism=128, key_type="string",
                                namespace_type=WINDOW,
                                keyed_states=[AggregatingStateDescriptor("clicks", Average(),
                                                                         "struct<sum:bigint,count:bigint>"),
                                              ListStateDescriptor("pages", "string")])
        window.write_keyed(pa.table({
            "key": ["alice", "alice", "😀"],
            "namespace": [w1, w2, w1],
            "clicks": [{"sum": 3, "count": 2}, {"sum": 1, "count": 1}, None],
            "pages": [["/", "/cart"], [], ["/😀"]],
        }))
        window.write_timers(pa.table({
            "key": ["alice", "alice", "😀"],
            "namespace": [w1, w2, w1],
            "timestamp": pa.array([59_999, 119_999, 59_999], pa.int64()),
            "domain": ["event", "event", "processing"],
        }))

        source = b.add_operator("kafka-source", parallelism=2, max_parallelism=128)
        source.write_list_state(operator_list_info(ListStateDescriptor("offsets", "bigint"), "split"),
                                [[100, 101], [205]])
        source.write_list_state(operator_list_info(ListStateDescriptor("partitions", "string"), "union"),
                                [["p0"], ["p1", "p2"]])

        rules = b.add_operator("broadcast-rules", parallelism=2, max_parallelism=128)
        rules.write_broadcast_state(BroadcastStateDescriptor("thresholds", "string", "double").info(),
                                    {"eu": 0.5, "us": 1.25, "😀": None})
    return target


def main() -> None:
    if TARGET.exists():
        sys.exit(f"{TARGET} exists; the golden savepoint is regenerated on purpose only (see this script's "
                 "docstring). Delete it by hand first if you really mean to.")
    print(build(TARGET))


if __name__ == "__main__":
    main()
