"""`statekit query`: SQL over a savepoint on embedded DuckDB (default) or on Spark (--engine spark)."""

# No `from __future__ import annotations`: see statekit_cli.app (typer's start-up cost).
import threading
from pathlib import Path
from typing import Optional

import typer

from statekit_cli.common import (
    FORMAT,
    JSON,
    PATH,
    PLAN,
    SQL,
    check_format,
    err,
    fail,
    out,
    plan_of,
    progress,
    quiet_jvm,
)

HELP = """Run SQL over a savepoint: each operator is a database named after its uid, holding the tables
keyed (key, a window's namespace if any, one column per keyed state), timers (key, namespace if any,
timestamp, domain)
and one table per operator state (split list: subtask, idx, value; union: idx, value; broadcast:
key, value). Names are lower-cased, with every character other than a-z, 0-9 and _ replaced by _:
uid tx-source -> tx_source.keyed. --prefix P makes it P_tx_source. A Flink SQL job's operators
without a uid are named by their stored name (GroupAggregate[51] -> groupaggregate_51); with --plan
(the job's compiled plan) their columns take the query's names and each also has a logical table. The same names work on both
engines: DuckDB in-process by default (no JVM), Spark with --engine spark."""


def query(
    path: Path = PATH,
    sql: str = typer.Argument(..., help='SQL, e.g. "SELECT count(*) FROM accounts.keyed WHERE balance < 0".',
                              show_default=False),
    engine: str = typer.Option("duckdb", "--engine", help="duckdb (embedded, default) or spark."),
    prefix: Optional[str] = typer.Option(None, "--prefix", help="Prefix of the database names (<prefix>_<uid>)."),
    limit: int = typer.Option(1000, "--limit", min=0, help="Print at most this many rows."),
    plan: Optional[Path] = PLAN,
    job_sql: Optional[Path] = SQL,
    fmt: str = FORMAT,
    json: bool = JSON,
) -> None:
    """Run SQL over a savepoint's tables."""
    plan = plan_of(plan, job_sql)
    fmt = "json" if json else check_format(fmt)
    engine = engine.lower()
    if engine == "duckdb":
        columns, rows, total = _duckdb(path, sql, prefix, limit, plan)
    elif engine == "spark":
        columns, rows, total = _spark(path, sql, prefix, limit, plan)
    else:
        fail(f"--engine must be duckdb or spark, not {engine!r}.")
    from statekit_cli.render import emit_rows

    emit_rows(out(), rows, columns, fmt, title=None)
    if total is not None and total > len(rows):
        err().print(f"the first {len(rows)} rows; more not shown (--limit {limit})", markup=False, style="dim")


query.__doc__ = HELP


def _duckdb(path: Path, sql: str, prefix: str | None, limit: int, plan: Optional[Path] = None):
    import duckdb

    from statekit.query import QueryError, sql_relation

    with duckdb.connect() as con:  # closed before the command returns, with DuckDB's threads
        rel = sql_relation(path, sql, prefix=prefix, connection=con, plan=plan)
        if rel is None:
            return [], [], None
        try:
            head = rel.limit(limit + 1).fetchall()
        except duckdb.Error as exc:
            raise QueryError(f"the query does not run: {' '.join(str(exc).split())}") from None
        columns = list(rel.columns)
    rows = [dict(zip(columns, r)) for r in head[:limit]]
    return columns, rows, (len(head) if len(head) > limit else None)


def _spark(path: Path, sql: str, prefix: str | None, limit: int, plan: Optional[Path] = None):
    with progress("starting Spark (JVM, Delta jars)") as (bar, task):
        with quiet_jvm():
            from statekit.spark import SavepointReader, spark_session

            spark = spark_session()
        bar.update(task, description="registering the savepoint's tables")
        from pyspark.errors import AnalysisException, ParseException

        from statekit_cli.common import is_checkpoint

        if is_checkpoint(path):  # a Spark streaming checkpoint: the names statekit.sql gives it
            from statekit.spark.streaming_state import StreamingStateReader

            databases = StreamingStateReader.read(spark, path).register(prefix)
        else:
            databases = SavepointReader.read(spark, str(path), plan=plan).register(prefix)
        bar.update(task, description="running the query")
        watcher = _SparkProgress(spark, bar, task)
        try:
            df = spark.sql(sql)
            head = [r.asDict(recursive=True) for r in df.limit(limit + 1).collect()]
        except (AnalysisException, ParseException) as exc:
            tables = "; ".join(f"{db}: {', '.join(names)}" for db, names in databases.items())
            fail(f"the query does not run: {' '.join(exc.getMessage().split())} The savepoint's tables are: {tables}")
        finally:
            watcher.stop()
    return df.columns, head[:limit], (len(head) if len(head) > limit else None)


class _SparkProgress:
    """Polls Spark's status tracker and shows finished/total tasks of the running stages."""

    def __init__(self, spark, bar, task) -> None:
        self._tracker = spark.sparkContext.statusTracker()
        self._bar, self._task = bar, task
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._done.wait(0.2):
            try:
                stages = [self._tracker.getStageInfo(s) for s in self._tracker.getActiveStageIds()]
            except Exception:  # noqa: BLE001 - the session is shutting down
                return
            stages = [s for s in stages if s is not None]
            if stages:
                total = sum(s.numTasks for s in stages)
                done = sum(s.numCompletedTasks for s in stages)
                self._bar.update(self._task, description=f"running the query: {done}/{total} tasks")

    def stop(self) -> None:
        self._done.set()
        self._thread.join()  # ends within one poll: no thread inside py4j when the interpreter exits


def register(app: typer.Typer) -> None:
    """Add the query command to the app."""
    app.command("query", help=HELP, short_help="SQL over a savepoint's tables (DuckDB; Spark with --engine spark).")(query)
