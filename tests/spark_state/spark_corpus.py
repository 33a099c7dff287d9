"""The committed Spark 4.1.0 checkpoint corpus (tests/fixtures/spark/4.1.0) and comparison with its expected.json."""

from __future__ import annotations

import datetime as dt
import json
import shutil
import zlib
from pathlib import Path
from typing import Any

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "spark" / "4.1.0"
#: the seventeen checkpoints: six queries x three providers, but transformWithState has no HDFS (Spark refuses it)
CASES = [f"{c}-{p}" for c in ("agg", "window_agg", "dedup", "join", "pandas_state", "tws")
         for p in ("hdfs", "rocksdb", "rocksdb_changelog") if (c, p) != ("tws", "hdfs")]


def case_dir(case: str) -> Path:
    d = FIXTURES / case
    assert (d / "expected.json").is_file(), f"fixture {d} is missing: the corpus is committed (tests/fixtures/spark)"
    return d


def expected(case: str) -> dict[str, Any]:
    return json.loads((case_dir(case) / "expected.json").read_text())


def copy_case(case: str, into: Path) -> Path:
    """A writable copy of the case's checkpoint under `into` (tests that damage files use it)."""
    target = into / case
    shutil.copytree(case_dir(case) / "checkpoint", target)
    for p in target.rglob("*"):
        p.chmod(0o755 if p.is_dir() else 0o644)
    return target


def hadoop_crc(path: Path) -> None:
    """Hadoop's ``.<name>.crc`` side file for `path`, as Spark's local checkpoint file system writes it."""
    data = path.read_bytes()
    sums = b"".join(zlib.crc32(data[i:i + 512]).to_bytes(4, "big") for i in range(0, len(data), 512))
    path.with_name(f".{path.name}.crc").write_bytes(b"crc\0" + (512).to_bytes(4, "big") + sums)


def copy_with_sst_crcs(case: str, into: Path) -> Path:
    """`copy_case` with Hadoop side files for its SSTs, as a checkpoint on Spark's local file system has (the corpus
    was committed without them): the SSTs are then read directly (`statekit.format.spark.sst`)."""
    cp = copy_case(case, into)
    for f in [*cp.glob("state/*/*/*/SSTs/*.sst"), *cp.glob("state/*/*/SSTs/*.sst")]:
        hadoop_crc(f)
    return cp


def plain(v: Any) -> Any:
    """A value as expected.json holds it (timestamps as microseconds since the epoch)."""
    if isinstance(v, dt.datetime):
        if v.tzinfo is None:
            v = v.replace(tzinfo=dt.timezone.utc)
        return (v - dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)) // dt.timedelta(microseconds=1)
    if isinstance(v, dict):
        return {k: plain(x) for k, x in v.items()}
    return v


def canon(rows: list[dict[str, Any]]) -> list[str]:
    return sorted(json.dumps(r, sort_keys=True) for r in rows)


def rows_by_partition(table_rows: list[dict[str, Any]], schema: dict[str, Any]) -> dict[int, list[dict[str, Any]]]:
    """Rows of a statekit table as expected.json's ``{"key": {...}, "value": {...}}`` per partition."""
    keys = list(schema["key"])
    values = [f"value_{n}" if n in keys else n for n in schema["value"]]
    out: dict[int, list[dict[str, Any]]] = {}
    for r in table_rows:
        out.setdefault(r["partition_id"], []).append(
            {"key": {k: plain(r[k]) for k in keys},
             "value": {n: plain(r[c]) for n, c in zip(schema["value"], values)}})
    return out


def assert_state(exp: dict[str, Any], read_table) -> int:
    """Every (operator, partition, store) of `exp` equals what ``read_table(op_id, store)`` (rows) gives; the rows."""
    tables: dict[tuple[int, str], dict[int, list]] = {}
    n = 0
    for part in exp["state"]:
        op, store = part["operatorId"], part["storeName"]
        if (op, store) not in tables:
            tables[(op, store)] = rows_by_partition(read_table(op, store), exp["state_schemas"][store])
        got = tables[(op, store)].get(part["partitionId"], [])
        assert canon(got) == canon(part["rows"]), (op, store, part["partitionId"], got, part["rows"])
        n += len(got)
    # nothing beyond what expected.json lists
    for (op, store), parts in tables.items():
        listed = {p["partitionId"] for p in exp["state"] if p["operatorId"] == op and p["storeName"] == store}
        assert set(parts) <= listed, (op, store, set(parts) - listed)
    return n
