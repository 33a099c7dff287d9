"""Read commands: inspect, show, get, check, diff, export. None of them writes into a savepoint."""

# No `from __future__ import annotations`: see statekit_cli.app (typer's start-up cost).
from pathlib import Path
from typing import Optional

import typer

from statekit_cli.common import (
    EXIT_PROBLEMS,
    FORMAT,
    HASH,
    JSON,
    KEY,
    NAME,
    OPTIONAL_UID,
    PATH,
    PLAN,
    SQL,
    UID,
    check_format,
    err,
    fail,
    open_savepoint,
    operator_id,
    out,
    plan_of,
    progress,
)
from statekit_cli.spark_state import BATCH, is_checkpoint

STRUCTURAL = {"key_group", "key", "namespace", "subtask", "idx", "timestamp", "domain"}


def inspect(path: Path = PATH, plan: Optional[Path] = PLAN, job_sql: Optional[Path] = SQL,
            json: bool = JSON, batch: Optional[int] = BATCH) -> None:
    """List the operators of a savepoint with their states, parallelism and sizes (reads only the manifest)."""
    plan = plan_of(plan, job_sql)
    from statekit_cli.render import dumps, emit_table, operator_rows, state_rows, summary_line

    if is_checkpoint(path):  # a Spark streaming checkpoint (statekit_cli.spark_state)
        from statekit_cli import spark_state

        return spark_state.inspect(path, batch, json)

    sp = open_savepoint(path, plan)
    console = out()
    if json:
        console.print(dumps(sp.metadata), markup=False)
        return
    console.print(summary_line(sp), markup=False)
    rows, columns = operator_rows(sp)
    emit_table(console, rows, columns, title="operators", identity=("uid", "uid hash"))
    rows, columns = state_rows(sp)
    emit_table(console, rows, columns, title="states", identity=("operator", "state"))


def show(
    path: Path = PATH,
    uid: Optional[str] = UID,
    uid_hash: Optional[str] = HASH,
    name: Optional[str] = NAME,
    table: str = typer.Option("keyed", "--table", help="keyed, timers, logical (with --plan), or an operator state name."),
    logical: bool = typer.Option(False, "--logical", help="The SQL operator's logical table (same as --table logical)."),
    plan: Optional[Path] = PLAN,
    job_sql: Optional[Path] = SQL,
    key: Optional[str] = typer.Option(None, "--key", help="Only this key (parsed as the key type)."),
    limit: int = typer.Option(20, "--limit", min=0, help="At most this many rows."),
    values: bool = typer.Option(False, "--values", help="Show state values (hidden by default)."),
    fmt: str = FORMAT,
    json: bool = JSON,
    batch: Optional[int] = BATCH,
) -> None:
    """Show rows of one table of an operator; state values are masked unless --values is given."""
    plan = plan_of(plan, job_sql)
    from statekit_cli.render import emit_rows, parse_key

    fmt = "json" if json else check_format(fmt)
    if is_checkpoint(path):  # a Spark streaming checkpoint: --table names a store or state variable
        from statekit_cli import spark_state

        return spark_state.show(path, uid, name, table, key, limit, values, fmt, batch)
    if logical:
        if table not in ("keyed", "logical"):
            fail("--logical shows the logical table; give it or --table, not both.")
        table = "logical"
    sp = open_savepoint(path, plan)
    op = operator_id(uid, uid_hash, name=name)
    meta = sp.operator(op)
    if key is not None:
        k = parse_key(key, meta.key_type)
        if table != "keyed":
            fail("--key works with --table keyed; use `statekit query` for other tables.")
        row = sp.get(op, k)
        if row is None:
            err().print(f"key not found: {key} in operator {meta.display_name}", markup=False)
            raise typer.Exit(EXIT_PROBLEMS)
        rows, columns, total = [{"key": k, **row}], ["key"] + [s.name for s in meta.keyed_states], 1
    else:
        arrow, total = _head(sp, op, meta, table, limit)
        rows, columns = arrow.to_pylist(), arrow.column_names
    masked = set() if values else {c for c in columns if c not in STRUCTURAL}
    emit_rows(out(), rows, columns, fmt, title=f"{meta.display_name} / {table}", masked=masked)
    notes = []
    if len(rows) < total:
        notes.append(f"{len(rows)} of {total} rows (--limit {limit})")
    if masked and rows:
        notes.append("values hidden; pass --values to show them")
    if notes:
        err().print("; ".join(notes), markup=False, style="dim")


def _head(sp, op, meta, table: str, limit: int):
    """The first `limit` rows of a table, reading only the files it needs, and the table's row count."""
    import pyarrow as pa

    from statekit.query import statekit_files

    if table in ("keyed", "timers") and meta.key_type is not None and not meta.is_native and statekit_files(sp):
        files = meta.files_of(table)
        total = sum(f.rows for f in files)
        parts, got = [], 0
        for entry in files:
            if got >= limit:
                break
            t = sp.read_file(entry, max_rows=limit - got).drop_columns(["key_group"])
            parts.append(t)
            got += t.num_rows
        if parts:
            return pa.concat_tables(parts).slice(0, limit), total
    arrow = _table(sp, op, meta, table)
    return arrow.slice(0, limit), arrow.num_rows


def _table(sp, op, meta, table: str):
    if table == "keyed":
        return sp.keyed_table(op)
    if table == "logical":
        return sp.logical_table(op)
    if table == "timers":
        t = sp.timers(op)
        return t.drop_columns(["key_group"]) if "key_group" in t.column_names else t
    info = meta.operator_state(table)
    if info.redistribution == "broadcast":
        return sp.broadcast_state(op, table)
    if info.redistribution == "union":
        return sp.union_state(op, table)
    return sp.list_state(op, table)


def get(
    path: Path = PATH,
    uid: Optional[str] = UID,
    uid_hash: Optional[str] = HASH,
    name: Optional[str] = NAME,
    key: str = KEY,
    state: Optional[str] = typer.Option(None, "--state", help="Only this state's value."),
    plan: Optional[Path] = PLAN,
    job_sql: Optional[Path] = SQL,
    json: bool = JSON,
    batch: Optional[int] = BATCH,
) -> None:
    """One key's state (reads only the file of its key group). Exit 1 when the key has no state."""
    plan = plan_of(plan, job_sql)
    from statekit_cli.render import cell, dumps, emit_table, parse_key

    if is_checkpoint(path):  # a Spark streaming checkpoint: reads only the key's partition; --state names the table
        from statekit_cli import spark_state

        return spark_state.get(path, uid, name, key, state, json, batch)

    sp = open_savepoint(path, plan)
    op = operator_id(uid, uid_hash, name=name)
    meta = sp.operator(op)
    k = parse_key(key, meta.key_type)
    if state is not None:
        meta.keyed_state(state)  # UnknownStateError names the states there are
    row = sp.get(op, k)
    if row is None:
        err().print(f"key not found: {key} in operator {meta.display_name}", markup=False)
        raise typer.Exit(EXIT_PROBLEMS)
    answer = row[state] if state is not None else row
    console = out()
    if json:
        console.print(dumps(answer), markup=False)
    elif state is not None:
        console.print(cell(answer), markup=False)
    else:
        emit_table(console, [[name, cell(v)] for name, v in row.items()], ["state", "value"],
                   title=f"{meta.display_name} / key {key}")


def check(
    path: Path = PATH,
    quick: bool = typer.Option(False, "--quick", help="Only sizes and checksums, not the rows inside."),
    plan: Optional[Path] = PLAN,
    job_sql: Optional[Path] = SQL,
    json: bool = JSON,
    batch: Optional[int] = BATCH,
) -> None:
    """Verify files, checksums, schemas, key groups and key uniqueness; exit 1 if anything is wrong."""
    plan = plan_of(plan, job_sql)
    from statekit.savepoint import check as run_check
    from statekit_cli.render import dumps, emit_table, problem_rows

    if is_checkpoint(path):  # a Spark streaming checkpoint
        from statekit_cli import spark_state

        return spark_state.check(path, batch, json)

    with progress("checking files, checksums and rows"):
        report = run_check(path, deep=not quick, plan=plan)
    console = out()
    if json:
        console.print(dumps({"path": str(report.path), "ok": report.ok, "files_checked": report.files_checked,
                             "rows_checked": report.rows_checked,
                             "problems": [{"kind": p.kind, "path": p.path, "message": p.message}
                                          for p in report.problems],
                             "unsupported": [{"operator": p.path, "message": p.message}
                                             for p in report.unsupported]}), markup=False)
    elif report.ok:
        console.print(f"OK {path}: {report.files_checked} files, {report.rows_checked} rows checked", markup=False)
    else:
        rows, columns = problem_rows(report)
        emit_table(console, rows, columns, title=f"{report.path}: {len(report.problems)} problem(s)",
                   identity=("file",))
    if not json:
        for p in report.unsupported:  # limits of statekit, not damage: said, without failing the check
            err().print(f"note: operator {p.path}: {p.message}", markup=False)
    if not report.ok:
        raise typer.Exit(EXIT_PROBLEMS)


def diff(
    a: Path = typer.Argument(..., help="The savepoint before.", show_default=False),
    b: Path = typer.Argument(..., help="The savepoint after.", show_default=False),
    uid: Optional[str] = OPTIONAL_UID,
    uid_hash: Optional[str] = HASH,
    name: Optional[str] = NAME,
    show_keys: int = typer.Option(5, "--show", min=0, help="List up to N keys added, removed and changed."),
    plan: Optional[Path] = PLAN,
    job_sql: Optional[Path] = SQL,
    json: bool = JSON,
    batch: Optional[int] = BATCH,
    to_batch: Optional[int] = typer.Option(None, "--to-batch", min=0, show_default=False,
                                           help="Spark checkpoints: the batch of B (default: its latest)."),
) -> None:
    """What differs from A to B: operators, settings, states, keys, timers and operator state rows. Exit 1 if any."""
    plan = plan_of(plan, job_sql)
    from statekit.savepoint.diff import diff as run_diff
    from statekit_cli.render import cell, dumps, emit_table

    if is_checkpoint(a):  # Spark streaming checkpoints (or one at two batches)
        from statekit_cli import spark_state

        return spark_state.diff(a, b, batch, to_batch, show_keys, json)

    with progress("comparing"):
        d = run_diff(a, b, op=operator_id(uid, uid_hash, required=False, name=name), examples=show_keys, plan=plan)
    console = out()
    if json:
        console.print(dumps(d.to_json()), markup=False)
    elif d.same:
        console.print(f"same: {a} and {b} hold the same operators, states and keys", markup=False)
    else:
        rows = [[name, "operator added", ""] for name in d.operators_added]
        rows += [[name, "operator removed", ""] for name in d.operators_removed]
        for o in d.operators:
            name = o.uid or o.uid_hash
            rows += [[name, f"{k} changed", f"{va} -> {vb}"] for k, (va, vb) in o.settings.items()]
            rows += [[name, "state added", s] for s in o.states_added]
            rows += [[name, "state removed", s] for s in o.states_removed]
            rows += [[name, "state type changed", s] for s in o.states_changed]
            for kind, count in (("added", o.keys_added), ("removed", o.keys_removed), ("changed", o.keys_changed)):
                if count:
                    shown = ", ".join(cell(k) for k in o.examples[kind])
                    more = " ..." if count > len(o.examples[kind]) else ""
                    rows.append([name, f"{count} key(s) {kind}", shown + more])
            for kind, count in (("added", o.timers_added), ("removed", o.timers_removed)):
                if count:
                    picked = [r for r in o.timers.to_pylist() if r["change"] == kind][:show_keys] if o.timers else []
                    shown = ", ".join(f"{cell(r['key'])}@{r['timestamp']} {r['domain']}" for r in picked)
                    rows.append([name, f"{count} timer(s) {kind}", shown + (" ..." if count > len(picked) else "")])
            for state, counts in o.state_row_counts().items():
                rows += [[name, f"state {state}: {n} row(s) {kind}", ""] for kind, n in counts.items() if n]
        emit_table(console, rows, ["operator", "difference", "detail"], title=f"{a} -> {b}", identity=("operator",))
    if not d.same:
        raise typer.Exit(EXIT_PROBLEMS)


def export(
    path: Path = PATH,
    target: Path = typer.Argument(..., help="Output directory (must not exist): <database>/<table>.", show_default=False),
    fmt: str = typer.Option("parquet", "--format", help="parquet, csv or delta (delta uses Spark)."),
    uid: Optional[str] = OPTIONAL_UID,
    uid_hash: Optional[str] = HASH,
    name: Optional[str] = NAME,
    plan: Optional[Path] = PLAN,
    job_sql: Optional[Path] = SQL,
) -> None:
    """Copy every table of a savepoint (or one operator's) out as Parquet, CSV or Delta tables."""
    plan = plan_of(plan, job_sql)
    from statekit.export import export as run_export

    fmt = check_format(fmt, ("parquet", "csv", "delta"))
    with progress(f"exporting as {fmt}"):
        written = run_export(path, target, format=fmt, op=operator_id(uid, uid_hash, required=False, name=name),
                             plan=plan)
    console = out()
    for name, rows in written.items():
        console.print(f"{target / name}  {rows} rows", markup=False)


def register(app: typer.Typer) -> None:
    """Add the read-only commands (inspect, show, get, check, diff, export) to the app."""
    for fn in (inspect, show, get, check, diff, export):
        app.command(fn.__name__)(fn)
