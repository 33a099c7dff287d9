"""A filter on a Flink SQL operator's struct key reads only the key groups of the keys it names (BinaryRowData hash)."""

from __future__ import annotations

from pathlib import Path

import statekit
from statekit.query import connect
from statekit.savepoint import Savepoint

CASE = Path(__file__).resolve().parents[2] / "fixtures" / "flink" / "sql" / "2.3.0" / "plan-hashmap-canonical"


def test_duckdb_reads_only_the_key_groups_of_a_sql_key_filter():
    sp = Savepoint.open(CASE / "savepoint", plan=CASE / "plan.json")
    table = sp.keyed_table("6_group-aggregate", with_key_group=True).to_pylist()
    alice_kg = next(r["key_group"] for r in table if r["key"] == {"user_name": "alice"})
    assert sp.key_group_of("6_group-aggregate", {"user_name": "alice"}) == alice_kg
    q = 'SELECT key.user_name AS u, "accState".count1 AS n FROM "6_group_aggregate".keyed WHERE key.user_name = \'alice\''
    con = connect(sp, q)  # the registered table holds what the filter made statekit read: alice's key group only
    registered = con.sql('SELECT key.user_name AS u FROM "6_group_aggregate".keyed').fetchall()
    assert sorted(registered) == sorted((r["key"]["user_name"],) for r in table if r["key_group"] == alice_kg)
    assert len(registered) < len(table)
    assert statekit.sql(CASE / "savepoint", q, plan=CASE / "plan.json").to_pylist() == [{"u": "alice", "n": 8}]
    # a two-field key: every field fixed (one of them by IN): the two keys' key groups
    q2 = ('SELECT key.device AS d FROM "25_deduplicate".keyed WHERE key.user_name = \'bartholomew\' '
          'AND key.device IN (1, 2) ORDER BY d')
    assert statekit.sql(CASE / "savepoint", q2, plan=CASE / "plan.json").to_pylist() == [{"d": 1}, {"d": 2}]
    rows = sp.keyed_table("25_deduplicate", with_key_group=True).to_pylist()
    groups = {sp.key_group_of("25_deduplicate", {"user_name": "bartholomew", "device": d}) for d in (1, 2)}
    con2 = connect(sp, q2)
    assert len(con2.sql('SELECT * FROM "25_deduplicate".keyed').fetchall()) == \
        sum(r["key_group"] in groups for r in rows) < len(rows)
    # a filter on part of the key prunes nothing (every key group is read)
    con3 = connect(sp, 'SELECT * FROM "25_deduplicate".keyed WHERE key.user_name = \'bartholomew\'')
    assert len(con3.sql('SELECT * FROM "25_deduplicate".keyed').fetchall()) == len(rows)


def test_spark_tasks_split_a_sql_operators_tables_by_key_group_ranges_and_add_up_to_the_whole(monkeypatch):
    import statekit.spark.scan as scan
    from statekit.spark.scan import TableSpec, plan_tasks, read_task_table

    monkeypatch.setattr(scan, "TASKS_PER_SUBTASK", 4)  # default 1: one task per subtask; here each cut in four

    sp = Savepoint.open(CASE / "savepoint", plan=CASE / "plan.json")
    for op in ("6_group-aggregate", "12_global-window-aggregate", "29_deduplicate", "43_join"):
        meta = sp.operator(op)
        for kind, whole in (("keyed", sp.keyed_table(op, with_key_group=True)), ("logical", sp.logical_table(op))):
            spec = TableSpec(str(CASE / "savepoint"), meta.uid_hash, kind, plan=str(CASE / "plan.json"))
            tasks = plan_tasks(meta, spec)
            assert len(tasks) == meta.parallelism * 4
            ranges = sorted(t.key_group_range for t in tasks)
            assert ranges[0][0] == 0 and ranges[-1][1] == meta.max_parallelism - 1
            assert all(a[1] + 1 == b[0] for a, b in zip(ranges, ranges[1:]))  # disjoint, covering every key group
            parts = [read_task_table(sp, meta, spec, t) for t in tasks]
            assert sorted(map(repr, (r for p in parts for r in p.to_pylist()))) == \
                sorted(map(repr, whole.to_pylist())), (op, kind)
            assert sum(p.num_rows > 0 for p in parts) > 1


def test_spark_filters_fixing_a_sql_key_read_only_its_key_groups():
    from pyspark.sql.datasource import EqualTo, GreaterThan, In, IsNotNull

    from statekit.spark.datasource import StatekitReader
    from statekit.spark.scan import TableSpec, read_task_table

    sp = Savepoint.open(CASE / "savepoint", plan=CASE / "plan.json")

    def scan(op: str, kind: str, filters: list) -> tuple[list, list, list]:
        meta = sp.operator(op)
        reader = StatekitReader(meta, TableSpec(str(CASE / "savepoint"), meta.uid_hash, kind, plan=str(CASE / "plan.json")))
        left = list(reader.pushFilters(filters))
        tasks = [p.value for p in reader.partitions()]
        rows = [r for t in tasks for r in read_task_table(sp, meta, reader.spec, t).to_pylist()]
        return left, tasks, rows

    whole = sp.keyed_table("6_group-aggregate", with_key_group=True).to_pylist()
    alice = sp.key_group_of("6_group-aggregate", {"user_name": "alice"})
    for kind, path in (("keyed", ("key", "user_name")), ("logical", ("user_name",))):
        filters = [IsNotNull(("key",)), EqualTo(path, "alice")]
        left, tasks, rows = scan("6_group-aggregate", kind, filters)
        assert EqualTo(path, "alice") in left  # Spark still filters the rows: only the key groups are pruned
        assert [t.key_groups for t in tasks] == [frozenset({alice})], kind
        name = (lambda r: r["key"]["user_name"]) if kind == "keyed" else (lambda r: r["user_name"])
        assert "alice" in {name(r) for r in rows}
        assert len(rows) == sum(r["key_group"] == alice for r in whole) < len(whole)
    # two-field key fixed by = and IN: both rows' key groups; the logical table's rows all come from them
    rows2 = [{"user_name": "bartholomew", "device": d} for d in (1, 2)]
    groups = frozenset(sp.key_group_of("25_deduplicate", r) for r in rows2)
    _, tasks, rows = scan("25_deduplicate", "logical", [EqualTo(("user_name",), "bartholomew"), In(("device",), (1, 2))])
    assert frozenset().union(*(t.key_groups for t in tasks)) == groups
    assert {(r["user_name"], r["device"]) for r in rows} >= {("bartholomew", 1), ("bartholomew", 2)}
    # a field left open, or a range: every key group (no pruning)
    for filters in ([EqualTo(("key", "user_name"), "bartholomew")], [GreaterThan(("key", "user_name"), "a")]):
        _, tasks, _ = scan("25_deduplicate", "keyed", filters)
        assert all(t.key_groups is None for t in tasks) and len(tasks) == sp.operator("25_deduplicate").parallelism
