"""The read commands on Spark streaming checkpoints (inspect, show, get, check, stats, diff), the repairs
(set, delete-key, rm-state, repair --plan: written as a new batch of a copy), and `repartition`.

`statekit_cli.read` and `statekit_cli.stats` hand a checkpoint to these functions; the operator is
named by its id (``--uid 0``) or name (``--name stateStoreSave``), or is the only one; a table by
``--table`` / ``--state`` (``default`` when omitted; a store, a state variable, or ``$timers``).
"""

# No `from __future__ import annotations`: see statekit_cli.app (typer's start-up cost).
from pathlib import Path
from typing import Optional

import typer

from statekit_cli.common import EXIT_PROBLEMS, err, fail, is_checkpoint, out, progress

BATCH = typer.Option(None, "--batch", min=0, show_default=False,
                     help="Spark checkpoints: the committed batch whose state is read (default: the latest).")


def _open(path: Path, batch: Optional[int]):
    from statekit.savepoint.spark_checkpoint import SparkCheckpoint

    return SparkCheckpoint.open(path, batch=batch)


def _op(sp, uid: Optional[str], name: Optional[str]) -> int:
    if uid is not None and name is not None:
        fail("name the operator by --uid (its id) or by --name, not both.")
    if uid is None and name is None:
        if len(sp.spark_operators) != 1:
            fail(f"the checkpoint has {len(sp.spark_operators)} stateful operators; name one with --uid ID or --name NAME.")
        return int(sp.spark_operators[0].id)
    return int(sp.spark_operator(uid if uid is not None else name).id)


def _store(table: Optional[str]) -> str:
    return "default" if table in (None, "keyed") else str(table)


def inspect(path: Path, batch: Optional[int], json: bool) -> None:
    """Operators, their partitions and tables, key and value columns."""
    from statekit_cli.render import dumps, emit_table

    sp = _open(path, batch)
    console = out()
    meta = sp.metadata
    if json:
        console.print(dumps(meta), markup=False)
        return
    console.print(f"{path}  Spark streaming checkpoint  query {meta['query_id']}  batch {sp.batch} (version "
                  f"{sp.version})  {meta['provider']}  watermark {meta['watermark_ms']} ms", markup=False)
    rows = [[str(o["id"]), o["name"], str(o["partitions"]), ", ".join(o["tables"])] for o in meta["operators"]]
    emit_table(console, rows, ["id", "operator", "partitions", "tables"], title="operators", identity=("id",))
    rows = [[str(o["id"]), t, ", ".join(f"{k} {v}" for k, v in s["key"].items()),
             ", ".join(f"{k} {v}" for k, v in s["value"].items())]
            for o in meta["operators"] for t, s in o["tables"].items()]
    emit_table(console, rows, ["id", "table", "key", "value"], title="tables", identity=("id", "table"))


def show(path: Path, uid: Optional[str], name: Optional[str], table: Optional[str], key: Optional[str], limit: int,
         values: bool, fmt: str, batch: Optional[int]) -> None:
    """Rows of one table (values masked unless --values)."""
    from statekit.savepoint.spark_tools import parse_key
    from statekit_cli.render import emit_rows

    sp = _open(path, batch)
    op = _op(sp, uid, name)
    store = _store(table)
    if key is not None:
        rows = sp.get(op, parse_key(key, sp, op), store=store)
        total = len(rows)
    else:
        t = sp.keyed_table(op, store=store)
        rows, total = t.slice(0, limit).to_pylist(), t.num_rows
    shape = sp.shape(op, store)
    columns = ["partition_id"] + [c.name for c in shape.columns]
    masked = set() if values else {c.name for c in shape.columns[len(shape.key.fields):]}
    emit_rows(out(), rows, columns, fmt, title=f"{op} / {store}", masked=masked)
    notes = []
    if len(rows) < total:
        notes.append(f"{len(rows)} of {total} rows (--limit {limit})")
    if masked and rows:
        notes.append("values hidden; pass --values to show them")
    if notes:
        err().print("; ".join(notes), markup=False, style="dim")


def get(path: Path, uid: Optional[str], name: Optional[str], key: str, state: Optional[str], json: bool,
        batch: Optional[int]) -> None:
    """One key's rows in one table, reading only the key's partition. Exit 1 when the key has no state."""
    from statekit.savepoint.spark_tools import parse_key
    from statekit_cli.render import cell, dumps, emit_table

    sp = _open(path, batch)
    op = _op(sp, uid, name)
    store = _store(state)
    rows = sp.get(op, parse_key(key, sp, op), store=store)
    if not rows:
        err().print(f"key not found: {key} in operator {op} table {store}", markup=False)
        raise typer.Exit(EXIT_PROBLEMS)
    console = out()
    if json:
        console.print(dumps(rows), markup=False)
        return
    columns = list(rows[0])
    emit_table(console, [[cell(r[c]) for c in columns] for r in rows], columns,
               title=f"{op} / {store} / key {key} (partition {rows[0]['partition_id']})")


def check(path: Path, batch: Optional[int], json: bool) -> None:
    """Read every state file of the batch: checksums, records, SSTs, rows. Exit 1 on any problem."""
    from statekit.savepoint.spark_tools import check_checkpoint
    from statekit_cli.render import dumps, emit_table

    with progress("checking state files"):
        report = check_checkpoint(_open(path, batch))
    console = out()
    if json:
        console.print(dumps({"path": report.path, "batch": report.batch, "ok": report.ok,
                             "files_checked": report.files_checked, "rows_checked": report.rows_checked,
                             "problems": [{"table": t, "message": m} for t, m in report.problems]}), markup=False)
    elif report.ok:
        console.print(f"OK {path} batch {report.batch}: {report.files_checked} files, {report.rows_checked} rows "
                      "checked", markup=False)
    else:
        emit_table(console, [list(p) for p in report.problems], ["table", "problem"],
                   title=f"{path}: {len(report.problems)} problem(s)", identity=("table",))
    if not report.ok:
        raise typer.Exit(EXIT_PROBLEMS)


def stats(path: Path, batch: Optional[int], json: bool) -> None:
    """Entries and bytes per operator, table and state partition, and the skew."""
    from statekit.savepoint.spark_tools import checkpoint_stats
    from statekit_cli.render import dumps, emit_table, human_bytes

    with progress("measuring"):
        figures = checkpoint_stats(_open(path, batch))
    console = out()
    if json:
        console.print(dumps([{"operator": s.operator, "name": s.name, "table": s.table, "entries": s.entries,
                              "bytes": s.bytes, "skew": s.skew} for s in figures]), markup=False)
        return
    rows = [[str(s.operator), s.name, s.table, str(sum(s.entries)), human_bytes(sum(s.bytes)),
             " / ".join(str(e) for e in s.entries), str(s.skew)] for s in figures]
    emit_table(console, rows, ["id", "operator", "table", "entries", "bytes", "per partition", "skew"],
               title="tables", identity=("id", "table"))


def diff(a: Path, b: Path, batch: Optional[int], to_batch: Optional[int], show_keys: int, json: bool) -> None:
    """Keys added, removed and changed per table from A (at --batch) to B (at --to-batch). Exit 1 if any."""
    from statekit.savepoint.spark_tools import diff_checkpoints
    from statekit_cli.render import dumps, emit_table

    if not is_checkpoint(b):
        fail(f"{a} is a Spark streaming checkpoint and {b} is not; diff compares two checkpoints (or one at two "
             "batches: give the same path twice with --batch and --to-batch).")
    with progress("comparing"):
        tables = diff_checkpoints(_open(a, batch), _open(b, to_batch))
    console = out()
    changed = [t for t in tables if not t.same]
    if json:
        console.print(dumps([{"operator": t.operator, "table": t.table, "added": t.added, "removed": t.removed,
                              "changed": t.changed} for t in tables]), markup=False)
    elif not changed:
        console.print(f"same: {a} and {b} hold the same state", markup=False)
    else:
        rows = []
        for t in changed:
            for kind, keys in (("added", t.added), ("removed", t.removed), ("changed", t.changed)):
                if keys:
                    more = " ..." if len(keys) > show_keys else ""
                    rows.append([f"{t.operator} / {t.table}", f"{len(keys)} key(s) {kind}",
                                 ", ".join(keys[:show_keys]) + more])
        emit_table(console, rows, ["table", "difference", "detail"], title=f"{a} -> {b}", identity=("table",))
    if changed:
        raise typer.Exit(EXIT_PROBLEMS)


def repartition(
    checkpoint: Path = typer.Argument(..., help="The Spark streaming checkpoint (never modified).", show_default=False),
    target: Path = typer.Argument(..., help="The new checkpoint to write (must not exist).", show_default=False),
    partitions: int = typer.Option(..., "--partitions", min=1, help="The new number of state partitions (and "
                                   "spark.sql.shuffle.partitions of the restarted query)."),
    engine: str = typer.Option("local", "--engine", help="local (one process) or spark (the state files read and "
                               "written by Spark tasks on the executors)."),
) -> None:
    """Write a copy of a Spark streaming checkpoint whose state is in --partitions partitions (keys re-placed by
    Spark's hash). Restart the query on TARGET with spark.sql.shuffle.partitions set to the same number."""
    from statekit.savepoint.spark_repartition import repartition as run

    if engine not in ("local", "spark"):
        fail(f"--engine must be local or spark, not {engine!r}.")
    spark = None
    if engine == "spark":
        from statekit_cli.common import quiet_jvm

        with progress("starting Spark"), quiet_jvm():
            from statekit.spark import spark_session

            spark = spark_session()
    with progress(f"repartitioning into {partitions} partitions"):
        if spark is None:
            summary = run(checkpoint, target, partitions=partitions)
        else:
            from statekit.spark.streaming_repartition import repartition as on_executors

            summary = on_executors(checkpoint, target, partitions=partitions, spark=spark)
    console = out()
    for line in summary.lines():
        console.print(line, markup=False)


def _value(text: str, option: str):
    import json as jsonlib

    from statekit.errors import InvalidArgumentError

    try:
        return jsonlib.loads(text)
    except ValueError:
        raise InvalidArgumentError(f"{option} {text!r} is not JSON; give the value's fields as an object, e.g. "
                                   '\'{"count": 10}\', or one value (quote strings: \'"text"\').') from None


def set_edits(source: Path, uid: Optional[str], name: Optional[str], key: str, state: str, value: str) -> list:
    """The edits of `statekit set` on a checkpoint: --state names the store or value variable, --value the value's
    fields (`statekit_cli.repair` runs them)."""
    from statekit.savepoint.patch import SetValue
    from statekit.savepoint.spark_tools import parse_key

    sp = _open(source, None)
    op = _op(sp, uid, name)
    return [SetValue(op, parse_key(key, sp, op), state, _value(value, "--value"))]


def delete_edits(source: Path, uid: Optional[str], name: Optional[str], keys: list) -> list:
    """The edits of `statekit delete-key` on a checkpoint: every entry of the keys in every store or variable."""
    from statekit.savepoint.patch import DeleteKeys
    from statekit.savepoint.spark_tools import parse_key

    sp = _open(source, None)
    op = _op(sp, uid, name)
    return [DeleteKeys(op, tuple(parse_key(k, sp, op) for k in keys))]


def rm_edits(source: Path, uid: Optional[str], name: Optional[str], states: list) -> list:
    """The edits of `statekit rm-state` on a checkpoint: empty stores or state variables (a join's four together)."""
    from statekit.savepoint.patch import RemoveState

    op = _op(_open(source, None), uid, name)
    return [RemoveState(op, s) for s in states]


def plan_edits(source: Path, items: list, plan: Path) -> list:
    """The edits of `statekit repair --plan` on a checkpoint: set, delete-key and rm-state; the operator by "uid"
    (its id) or "name", the table by "state" ("default" when omitted), keys as JSON."""
    import json as jsonlib

    from statekit.errors import InvalidArgumentError
    from statekit.savepoint import patch as P
    from statekit.savepoint.spark_tools import parse_key

    sp = _open(source, None)
    edits: list = []
    for i, item in enumerate(items):
        kind = item.get("edit")
        if kind not in ("set", "delete-key", "rm-state"):
            raise InvalidArgumentError(f"--plan {plan}: edit {i + 1} is {kind!r}; a Spark streaming checkpoint takes "
                                       "set, delete-key and rm-state edits (statekit repartition changes partitions).")
        op = _op(sp, None if item.get("uid") is None else str(item["uid"]), item.get("name"))

        def key(k, op=op):
            return parse_key(k if isinstance(k, str) else jsonlib.dumps(k), sp, op)

        try:
            if kind == "set":
                edits.append(P.SetValue(op, key(item["key"]), item.get("state"), item["value"]))
            elif kind == "delete-key":
                edits.append(P.DeleteKeys(op, tuple(key(k) for k in item["keys"])))
            else:
                edits.append(P.RemoveState(op, item["state"]))
        except KeyError as exc:
            raise InvalidArgumentError(f"--plan {plan}: edit {i + 1} ({kind}) lacks the field {exc}.") from None
    return edits


def register(app: typer.Typer) -> None:
    """Add `repartition` (Spark checkpoints) to the app."""
    app.command("repartition")(repartition)


