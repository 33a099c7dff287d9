"""The acceptance savepoint of issue 5, written once per test run with the foundation's writer."""

from __future__ import annotations

import pyarrow as pa
import pytest

from statekit.savepoint import SavepointBuilder
from statekit.state import (
    AggregateFunction,
    AggregatingStateDescriptor,
    ListStateDescriptor,
    MapStateDescriptor,
    ReducingStateDescriptor,
    ValueStateDescriptor,
)
from statekit.state.descriptors import BroadcastStateDescriptor, OperatorStateInfo

KEYS = [1, 2, 3]


class AvgFn(AggregateFunction):
    """Average with a ``struct<count,sum>`` accumulator."""

    def create_accumulator(self):
        return {"count": 0, "sum": 0}

    def add(self, value, acc):
        return {"count": acc["count"] + 1, "sum": acc["sum"] + value}

    def get_result(self, acc):
        return acc["sum"] / acc["count"]


VALUE = ValueStateDescriptor("count", "bigint")
LIST = ListStateDescriptor("events", "bigint")
MAP = MapStateDescriptor("attrs", "string", "string")
REDUCING = ReducingStateDescriptor("total", lambda a, b: a + b, "bigint")
AGGREGATING = AggregatingStateDescriptor("avg", AvgFn(), "struct<count:bigint,sum:bigint>")
KEYED_STATES = [VALUE, LIST, MAP, REDUCING, AGGREGATING]


def expected_keyed_rows() -> list[dict]:
    """What `proc`'s keyed table holds, as Spark returns it (maps as dicts, structs as Rows->dicts)."""
    return [
        {
            "key": k,
            "count": 10 * k,
            "events": [k, k + 1],
            "attrs": {"k": str(k)},
            "total": 100 * k,
            "avg": {"count": k, "sum": 2 * k},
        }
        for k in KEYS
    ]


def write_acceptance_savepoint(path) -> None:
    """keyed value/list/map/reducing/aggregating state, timers, list/union/broadcast state; parallelism 4."""
    with SavepointBuilder(path, checkpoint_id=5, job_name="acceptance") as b:
        proc = b.add_operator("proc", parallelism=4, max_parallelism=128, key_type="bigint", keyed_states=KEYED_STATES)
        rows = expected_keyed_rows()
        proc.write_keyed(
            pa.table(
                {
                    "key": pa.array(KEYS, pa.int64()),
                    "count": pa.array([r["count"] for r in rows], pa.int64()),
                    "events": pa.array([r["events"] for r in rows], pa.list_(pa.int64())),
                    "attrs": pa.array([list(r["attrs"].items()) for r in rows], pa.map_(pa.string(), pa.string())),
                    "total": pa.array([r["total"] for r in rows], pa.int64()),
                    "avg": pa.array([r["avg"] for r in rows], pa.struct([("count", pa.int64()), ("sum", pa.int64())])),
                }
            )
        )
        proc.write_timers(
            pa.table(
                {
                    "key": pa.array(KEYS * 2, pa.int64()),
                    "timestamp": pa.array([1000 + k for k in KEYS] + [2000 + k for k in KEYS], pa.int64()),
                    "domain": ["event"] * 3 + ["processing"] * 3,
                }
            )
        )
        proc.write_broadcast_state(BroadcastStateDescriptor("rules", "bigint", "string").info(), {1: "1", 2: "2", 3: "3"})
        src = b.add_operator("src", parallelism=4, max_parallelism=128)
        src.write_list_state(OperatorStateInfo("buffer", "split", "bigint"), [[1], [2], [3], []])
        src.write_list_state(OperatorStateInfo("offsets", "union", "bigint"), [[1], [2], [3], []])
        enrich = b.add_operator(
            "enrich", parallelism=2, max_parallelism=128, key_type="bigint",
            keyed_states=[ValueStateDescriptor("label", "string")],
        )
        enrich.write_keyed(pa.table({"key": pa.array(KEYS, pa.int64()), "label": [f"label-{k}" for k in KEYS]}))


@pytest.fixture(scope="session")
def acceptance_savepoint(tmp_path_factory):
    path = tmp_path_factory.mktemp("spark") / "acceptance"
    write_acceptance_savepoint(path)
    return path


@pytest.fixture(scope="session")
def expected_proc_rows():
    """`proc`'s keyed table as written, ordered by key."""
    return expected_keyed_rows()
