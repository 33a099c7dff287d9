"""The end-to-end demo behind `statekit demo`: write a savepoint, check it, read it locally and with Spark."""

from __future__ import annotations

import shutil
from pathlib import Path

import pyarrow as pa
from rich.console import Console

from statekit.savepoint import Savepoint, SavepointBuilder, check
from statekit.state import ListStateDescriptor, MapStateDescriptor, ValueStateDescriptor
from statekit.state.descriptors import BroadcastStateDescriptor, operator_list_info


def write_demo_savepoint(path: Path, *, users: int = 10_000) -> Path:
    """A savepoint of a small 'accounts' job: balances per user, recent amounts, a rules broadcast."""
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


def run_demo(out: Path, *, use_spark: bool = True, console: Console | None = None) -> None:
    """Write, check and query a savepoint under `out` (recreated each run)."""
    console = console or Console()
    out = Path(out)
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    path = write_demo_savepoint(out / "savepoint-42")
    console.print(f"[bold]1. wrote[/] {path}")
    report = check(path)
    console.print(f"[bold]2. check:[/] {'OK' if report.ok else report}")
    sp = Savepoint.open(path)
    table = sp.keyed_table("accounts")
    negative = table.filter(pa.compute.less(table.column("balance"), 0)).num_rows
    console.print(f"[bold]3. local read:[/] {table.num_rows} keys, {negative} with a negative balance; "
                  f"user-00042 -> {sp.get('accounts', 'user-00042')}")
    if use_spark:
        _spark_part(path, console)


def _spark_part(path: Path, console: Console) -> None:
    from statekit.spark import SavepointReader, spark_session

    spark = spark_session()
    reader = SavepointReader.read(spark, str(path))
    reader.register(prefix="demo")
    rows = spark.sql(
        "SELECT count(*) AS negative, round(sum(balance), 2) AS total FROM demo_accounts.keyed WHERE balance < 0"
    ).collect()
    console.print(f"[bold]4. Spark SQL:[/] {rows[0].asDict()}")
