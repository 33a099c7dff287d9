"""The timer service on its own: dedup, delete, firing order, namespaces, and the savepoint round trip."""

from __future__ import annotations

import pyarrow as pa

from statekit.format.keyed import timer_rows_from_table, timers_table
from statekit.runtime.timers import InternalTimerService
from statekit.types import parse_ddl


def test_one_timer_per_timestamp_key_namespace_and_lazy_delete():
    ts = InternalTimerService()
    ts.register_event_time_timer(10, "a", 3)
    ts.register_event_time_timer(10, "a", 3)  # deduplicated
    ts.register_event_time_timer(5, "b", 7)
    ts.register_event_time_timer(7, "a", 3, (0, 10))  # same key, window namespace: a separate timer
    ts.delete_event_time_timer(5, "b")
    assert len(ts) == 2
    fired = []
    while (t := ts.pop_event_timer(100)) is not None:
        fired.append(t)
    assert fired == [(7, "a", (0, 10), 3), (10, "a", None, 3)]


def test_processing_timers_report_registration_and_next_time():
    seen = []
    ts = InternalTimerService(seen.append)
    ts.register_processing_time_timer(50, "k", 1)
    ts.register_processing_time_timer(20, "k", 1)
    ts.delete_processing_time_timer(20, "k")
    assert seen == [50, 20] and ts.next_processing_time() == 50
    assert ts.pop_processing_timer(49) is None and ts.pop_processing_timer(50) == (50, "k", None, 1)


def test_namespaced_timers_round_trip_through_the_savepoint_layout():
    ts = InternalTimerService()
    ts.register_event_time_timer(99, ("x", 1), 4, (0, 100))
    ts.register_processing_time_timer(5, ("y", 2), 9)
    key_type = parse_ddl("struct<a:string,b:bigint>")
    table = timers_table(ts.snapshot(), key_type, parse_ddl("struct<start:bigint,end:bigint>"))
    assert table.column_names == ["key_group", "key", "namespace", "timestamp", "domain"]
    assert table.schema.field("key").type == key_type and table.schema.field("timestamp").type == pa.int64()
    restored = InternalTimerService()
    restored.restore(timer_rows_from_table(table))
    assert sorted(map(repr, restored.snapshot())) == sorted(map(repr, ts.snapshot()))
