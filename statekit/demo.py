"""The end-to-end demo behind `statekit demo`: a live job's savepoint, inspected, queried, repaired, restored."""

from __future__ import annotations

import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
from rich.console import Console
from rich.markup import escape

from statekit.savepoint import Savepoint, SavepointBuilder, check
from statekit.state import ListStateDescriptor, MapStateDescriptor, ValueStateDescriptor
from statekit.state.descriptors import BroadcastStateDescriptor, operator_list_info


def write_demo_savepoint(path: Path, *, users: int = 10_000) -> Path:
    """A hand-built savepoint of an 'accounts' job (used by the CLI tests): balances, recent amounts, rules."""
    balance = ValueStateDescriptor("balance", "double")
    recent = ListStateDescriptor("recent", "double")
    flags = MapStateDescriptor("flags", "string", "boolean")
    keys = [f"user-{i:05d}" for i in range(users)]
    table = pa.table({
        "key": keys,
        "balance": [round((i * 37 % 1000) - 120.5, 2) for i in range(users)],
        "recent": [[float(i % 7), float(i % 11)] if i % 3 else [] for i in range(users)],
        "flags": pa.array([[("vip", True)] if i % 97 == 0 else None for i in range(users)],
                          pa.map_(pa.string(), pa.bool_())),
    })
    with SavepointBuilder(path, checkpoint_id=42, job_name="accounts") as b:
        op = b.add_operator("accounts", parallelism=2, max_parallelism=128, key_type="string",
                            keyed_states=[balance, recent, flags])
        op.write_keyed(table)
        op.write_timers(pa.table({"key": keys[:3], "timestamp": [60_000, 120_000, 180_000],
                                  "domain": ["event", "event", "processing"]}))
        src = b.add_operator("transactions-source", parallelism=2, max_parallelism=128)
        src.write_list_state(operator_list_info(ListStateDescriptor("offsets", "bigint"), "split"), [[1200], [1187]])
        rules = b.add_operator("rules", parallelism=1, max_parallelism=128)
        rules.write_broadcast_state(BroadcastStateDescriptor("limits", "string", "double").info(),
                                    {"default": 1000.0, "vip": 50_000.0})
    return path


DEMO_MARKER = ".statekit-demo"
DEMO_ENTRIES = frozenset({DEMO_MARKER, "savepoint-1", "savepoint-2", "savepoint-3", "savepoint-4"})


def prepare_output(out: Path, *, replace: bool = False) -> Path:
    """Make `out` the demo's output directory without ever deleting what statekit did not create.

    A missing or empty `out` is used (and marked with a `DEMO_MARKER` file). An earlier demo's
    output - marked, and holding nothing but the demo's own entries - is removed first only with
    ``replace=True``. Anything else (a file, a directory with other content, ``.``) is refused with
    `OutputExistsError` and left byte-identical.
    """
    from statekit.errors import OutputExistsError

    if out.exists() or out.is_symlink():
        if not out.is_dir() or out.is_symlink():
            raise OutputExistsError(f"{out} exists and is not a directory; give --out a new or empty directory.")
        entries = {p.name for p in out.iterdir()}
        if entries:
            # Ours: marked, only the demo's names, and each savepoint holding exactly its manifest's files.
            ours = (out / DEMO_MARKER).is_file() and entries <= DEMO_ENTRIES and all(
                check(out / name, deep=False).ok for name in entries - {DEMO_MARKER})
            if not ours:
                raise OutputExistsError(
                    f"{out} is not empty and not an earlier demo's output; statekit never deletes what it did not "
                    "create. Give --out a new or empty directory."
                )
            if not replace:
                raise OutputExistsError(
                    f"{out} holds an earlier demo's output; pass --replace to write over it, or give --out a new "
                    "directory."
                )
            for name in sorted(entries - {DEMO_MARKER}):
                shutil.rmtree(out / name)
    out.mkdir(parents=True, exist_ok=True)
    (out / DEMO_MARKER).write_text("written by `statekit demo`; `statekit demo --replace` may remove this directory's"
                                   " savepoint-1..4\n")
    return out


def transactions(start: int, count: int, users: int) -> list[tuple[str, float]]:
    """Deterministic (user, amount) transactions; amounts may be negative (withdrawals)."""
    return [(f"user-{(i * 7919) % users:04d}", float((i * 37) % 200 - 90)) for i in range(start, start + count)]


def run_accounts_job(path_in: Path | None, path_out: Path, records: list, *, parallelism: int,
                     source_uid: str = "transactions") -> list:
    """The live job: balances and the last three amounts per user, ending in a savepoint.

    A restored source resumes from its checkpointed offset (as in Flink), so a run over new input
    gives its source a new uid and lets the old source's state go unrestored.
    """
    from statekit.runtime import KeyedProcessFunction, StreamExecutionEnvironment

    class Accounts(KeyedProcessFunction):
        def open(self, ctx):
            self.balance = ctx.get_state(ValueStateDescriptor("balance", "double", 0.0))
            self.recent = ctx.get_list_state(ListStateDescriptor("recent", "double"))

        def process_element(self, value, ctx):
            user, amount = value
            balance = self.balance.value() + amount
            self.balance.update(balance)
            self.recent.update((list(self.recent.get()) + [amount])[-3:])
            if balance < -500:
                yield user, balance

    env = StreamExecutionEnvironment(parallelism=parallelism, max_parallelism=128)
    stream = env.from_collection(records).uid(source_uid).key_by(lambda t: t[0], key_type="string")
    alerts = stream.process(Accounts()).uid("accounts").name("accounts")
    return alerts.execute_and_collect(job_name="accounts", restore_from=path_in, final_savepoint=path_out,
                                      allow_non_restored_state=path_in is not None)


def run_demo(out: Path, *, use_spark: bool = True, console: Console | None = None, users: int = 5_000,
             replace: bool = False) -> None:
    """Run a job, savepoint it, check and query the state, repair it offline, and restore it live.

    `out` must be missing or empty; with ``replace=True`` it may also be an earlier demo's output
    (see `prepare_output`). Nothing else is ever deleted.
    """
    from statekit.savepoint.transforms import change_operator_identifier

    console = console or Console()
    out = prepare_output(Path(out), replace=replace)

    first = transactions(0, 50_000, users)
    sp1 = out / "savepoint-1"
    alerts = run_accounts_job(None, sp1, first, parallelism=2)
    console.print(f"[bold]1. ran[/] the accounts job on {len(first):,} transactions at parallelism 2: "
                  f"{len(alerts)} overdraft alerts; final savepoint {escape(str(sp1))}")

    report = check(sp1)
    console.print(f"[bold]2. check:[/] {'OK' if report.ok else escape(str(report))} "
                  f"({report.files_checked} files, {report.rows_checked} rows)")

    sp = Savepoint.open(sp1)
    table = sp.keyed_table("accounts")
    negative = table.filter(pc.less(table.column("balance"), 0)).num_rows
    console.print(f"[bold]3. local read:[/] {table.num_rows:,} keys, {negative:,} with a negative balance; "
                  f"user-0042 -> {escape(str(sp.get('accounts', 'user-0042')))}")

    if use_spark:
        _spark_part(sp1, console)

    sp2 = out / "savepoint-2"
    change_operator_identifier(sp1, sp2, "accounts", "accounts-v2")
    console.print(f"[bold]5. repaired offline:[/] uid accounts -> accounts-v2 in {escape(str(sp2))} (source untouched)")

    # Restore the renamed state under the old uid to show the mapping is by uid hash: rename it back.
    sp3 = out / "savepoint-3"
    change_operator_identifier(sp2, sp3, "accounts-v2", "accounts")
    second = transactions(50_000, 10_000, users)
    run_accounts_job(sp3, out / "savepoint-4", second, parallelism=3, source_uid="transactions-day-2")
    expected = sum(a for u, a in first + second if u == "user-0042")
    row = Savepoint.open(out / "savepoint-4").get("accounts", "user-0042")
    if row is None:
        raise SystemExit("demo: user-0042 has no state in the restored job's savepoint")
    got = row["balance"]
    console.print(f"[bold]6. restored[/] at parallelism 3 and processed {len(second):,} more: user-0042 balance "
                  f"{got:.1f} (expected {expected:.1f}) {'OK' if abs(got - expected) < 1e-6 else 'MISMATCH'}")
    if abs(got - expected) > 1e-6:
        raise SystemExit("demo: restored state does not match the expected balance")


def _spark_part(path: Path, console: Console) -> None:
    import os

    from statekit.spark import SavepointReader, spark_session
    from statekit.spark.session import quiet_jvm_start

    with quiet_jvm_start(os.environ.get("STATEKIT_DEBUG") != "1"):  # no Ivy/JVM start-up logs in the demo
        spark = spark_session()
    reader = SavepointReader.read(spark, str(path))
    reader.register(prefix="demo")
    row = spark.sql(
        "SELECT count(*) AS overdrawn, round(min(balance), 1) AS lowest FROM demo_accounts.keyed WHERE balance < 0"
    ).collect()[0]
    console.print(f"[bold]4. Spark SQL:[/] {escape(str(row.asDict()))} (SELECT ... FROM demo_accounts.keyed WHERE balance < 0)")
