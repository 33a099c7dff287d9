"""The `statekit` command: inspect, check and read savepoints from the shell."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer
from rich.console import Console

from statekit.errors import StatekitError

app = typer.Typer(
    name="statekit",
    help="The state of stream-processing jobs as data: inspect, check and read savepoints.",
    no_args_is_help=True,
    add_completion=False,
)
console = Console()
err_console = Console(stderr=True)


def _fail(exc: StatekitError) -> None:
    err_console.print(f"[bold red]error:[/] {type(exc).__name__}: {exc}", highlight=False)
    raise typer.Exit(code=2)


@app.command()
def inspect(path: Path = typer.Argument(..., help="Savepoint or checkpoint directory.")) -> None:
    """List the operators of a savepoint with their states, parallelism and sizes."""
    from statekit.savepoint import Savepoint
    from statekit_cli.render import operators_table, states_table, summary_line

    try:
        sp = Savepoint.open(path)
    except StatekitError as exc:
        _fail(exc)
    console.print(summary_line(sp))
    console.print(operators_table(sp))
    console.print(states_table(sp))


@app.command()
def check(
    path: Path = typer.Argument(..., help="Savepoint or checkpoint directory."),
    quick: bool = typer.Option(False, "--quick", help="Only sizes and checksums, not the rows inside."),
) -> None:
    """Verify files, checksums, schemas, key groups and key uniqueness. Never modifies anything."""
    from statekit.savepoint import check as run_check
    from statekit_cli.render import problems_table

    report = run_check(path, deep=not quick)
    if report.ok:
        console.print(f"[green]OK[/] {path}: {report.files_checked} files, {report.rows_checked} rows checked")
        return
    console.print(problems_table(report))
    raise typer.Exit(code=1)


@app.command()
def show(
    path: Path = typer.Argument(..., help="Savepoint or checkpoint directory."),
    uid: str = typer.Option(..., "--uid", help="Operator uid (or the uid hash with --hash)."),
    by_hash: bool = typer.Option(False, "--hash", help="Treat --uid as a 32-hex uid hash."),
    table: str = typer.Option("keyed", "--table", help="keyed, timers, or an operator state name."),
    key: Optional[str] = typer.Option(None, "--key", help="Show only this key (parsed as the key type)."),
    limit: int = typer.Option(20, "--limit", min=0, help="At most this many rows."),
    values: bool = typer.Option(False, "--values", help="Show state values (hidden by default)."),
) -> None:
    """Show rows of one table of an operator; state values are masked unless --values is given."""
    from statekit.identifiers import OperatorIdentifier
    from statekit.savepoint import Savepoint
    from statekit_cli.render import parse_key, rows_table

    try:
        sp = Savepoint.open(path)
        op = OperatorIdentifier.for_uid_hash(uid) if by_hash else OperatorIdentifier.for_uid(uid)
        meta = sp.operator(op)
        if key is not None:
            row = sp.get(op, parse_key(key, meta.key_type))
            rows = [] if row is None else [{"key": parse_key(key, meta.key_type), **row}]
            columns = ["key"] + [s.name for s in meta.keyed_states]
        else:
            arrow = _table(sp, op, meta, table).slice(0, limit)
            rows, columns = arrow.to_pylist(), arrow.column_names
    except StatekitError as exc:
        _fail(exc)
    masked = set() if values else _value_columns(columns)
    console.print(rows_table(rows, columns, masked, title=f"{meta.display_name} / {table}"))
    if masked:
        console.print("[dim]values hidden; pass --values to show them[/]")


@app.command()
def query(
    path: Path = typer.Argument(..., help="Savepoint or checkpoint directory."),
    sql: str = typer.Argument(..., help='Spark SQL, e.g. "SELECT count(*) FROM accounts.keyed WHERE balance < 0".'),
    prefix: Optional[str] = typer.Option(None, "--prefix", help="Prefix of the database names (<prefix>_<uid>)."),
    limit: int = typer.Option(50, "--limit", min=0, help="At most this many rows."),
) -> None:
    """Run Spark SQL over a savepoint: a database per operator (uid), tables keyed, timers and one per
    operator state. Starts a local Spark session (a few seconds); prints what the query selects."""
    from pyspark.errors import AnalysisException

    from statekit.spark import SavepointReader, spark_session
    from statekit_cli.render import rows_table

    databases: dict[str, list[str]] = {}
    try:
        spark = spark_session()
        databases = SavepointReader.read(spark, path).register(prefix)
        df = spark.sql(sql)
        rows = [r.asDict(recursive=True) for r in df.limit(limit).collect()]
    except StatekitError as exc:
        _fail(exc)
    except AnalysisException as exc:
        tables = "; ".join(f"{db}: {', '.join(names)}" for db, names in databases.items())
        err_console.print(f"[bold red]error:[/] the query does not run: {exc.getMessage()}\n"
                          f"The savepoint's tables are: {tables}", highlight=False)  # fmt: skip
        raise typer.Exit(code=2) from None
    console.print(rows_table(rows, df.columns, set(), title=sql))


def _table(sp, op, meta, table: str):
    if table == "keyed":
        return sp.keyed_table(op)
    if table == "timers":
        return sp.timers(op)
    info = meta.operator_state(table)
    if info.redistribution == "broadcast":
        return sp.broadcast_state(op, table)
    if info.redistribution == "union":
        return sp.union_state(op, table)
    return sp.list_state(op, table)


def _value_columns(columns: list[str]) -> set[str]:
    structural = {"key_group", "key", "namespace", "subtask", "idx", "timestamp", "domain"}
    return {c for c in columns if c not in structural}


def _run_transform(plan_fn, apply: bool) -> None:
    try:
        plan = plan_fn(dry_run=not apply)
    except StatekitError as exc:
        _fail(exc)
    console.print(str(plan), highlight=False)
    if not apply:
        console.print("[yellow]dry run[/]: nothing written; pass --apply to write the new savepoint")


_APPLY = typer.Option(False, "--apply", help="Write the new savepoint (default: dry run that only reports).")


@app.command("rename-uid")
def rename_uid(
    source: Path = typer.Argument(..., help="Savepoint to read (never modified)."),
    target: Path = typer.Argument(..., help="New savepoint to write (must not exist)."),
    old: str = typer.Option(..., "--from", help="Current uid of the operator."),
    new: str = typer.Option(..., "--to", help="New uid."),
    apply: bool = _APPLY,
) -> None:
    """Give an operator a new uid; its state is carried over unchanged into a new savepoint."""
    from statekit.savepoint.transforms import rename_operator

    _run_transform(lambda dry_run: rename_operator(source, target, old, new, dry_run=dry_run), apply)


@app.command("remove-operator")
def remove_operator_cmd(
    source: Path = typer.Argument(..., help="Savepoint to read (never modified)."),
    target: Path = typer.Argument(..., help="New savepoint to write (must not exist)."),
    uid: str = typer.Option(..., "--uid", help="Uid of the operator to drop."),
    apply: bool = _APPLY,
) -> None:
    """Drop an operator and all its state into a new savepoint."""
    from statekit.savepoint.transforms import remove_operator

    _run_transform(lambda dry_run: remove_operator(source, target, uid, dry_run=dry_run), apply)


@app.command("set-max-parallelism")
def set_max_parallelism(
    source: Path = typer.Argument(..., help="Savepoint to read (never modified)."),
    target: Path = typer.Argument(..., help="New savepoint to write (must not exist)."),
    uid: str = typer.Option(..., "--uid", help="Uid of the keyed operator."),
    max_parallelism: int = typer.Option(..., "--max", help="New max parallelism (1..32768)."),
    apply: bool = _APPLY,
) -> None:
    """Re-hash an operator's keyed state and timers into a new max parallelism."""
    from statekit.savepoint.transforms import change_max_parallelism

    _run_transform(
        lambda dry_run: change_max_parallelism(source, target, uid, max_parallelism, dry_run=dry_run), apply
    )


@app.command()
def demo(
    out: Path = typer.Option(Path("demo-output"), "--out", help="Directory for the demo's savepoints."),
    spark: bool = typer.Option(True, "--spark/--no-spark", help="Also query the savepoint with Spark SQL."),
) -> None:
    """Run the end-to-end demo on the embedded defaults (local files, local Spark)."""
    from statekit.demo import run_demo

    try:
        run_demo(out, use_spark=spark, console=console)
    except StatekitError as exc:
        _fail(exc)


__import__("statekit_cli.convert").convert.register(app)  # statekit convert (cli/convert.py)


def main() -> None:
    """Entry point of the `statekit` console script."""
    app()


if __name__ == "__main__":
    main()
