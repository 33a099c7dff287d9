"""A full disk under Spark's executors: every executor-side writer (statekit and Flink format, bootstrap and
rewrite) raises `StorageFullError` on the driver, leaves no staging behind and never touches its source.

The target is a real size-limited tmpfs (root only: skipped with a message otherwise).
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import pyarrow as pa
import pytest

from statekit.errors import StorageFullError
from statekit.savepoint import Savepoint, SavepointBuilder, check
from statekit.spark import KeyedStateBootstrapFunction, OperatorTransformation, SavepointWriter
from statekit.state import ValueStateDescriptor
from statekit.testing import tree_digest

pytestmark = pytest.mark.spark

PAYLOAD = ValueStateDescriptor("payload", "string")


# 512 hex characters of 8 different hashes: nothing for Snappy or a dictionary to squeeze (~480 B a row in Parquet)
_HEX = "concat(" + ", ".join(f"sha2(CAST(id * 8 + {j} AS STRING), 256)" for j in range(8)) + ")"


def _payload(spark, n: int):
    """`n` keys with a 512-character payload each."""
    return spark.range(0, n, 1, numPartitions=4).selectExpr("id AS key", f"{_HEX} AS payload")


class Payload(KeyedStateBootstrapFunction):
    def open(self, ctx):
        self.payload = ctx.get_state(PAYLOAD)

    def process_element(self, row, ctx):
        self.payload.update(row.payload)


def _columnar(spark, n):
    return OperatorTransformation.bootstrap_with(_payload(spark, n)).key_by("key").columns(PAYLOAD)


def _function(spark, n):
    return OperatorTransformation.bootstrap_with(_payload(spark, n)).key_by("key", key_type="bigint").transform(Payload())


def _fixed_width(spark, n):
    df = spark.range(0, n, 1, numPartitions=4).selectExpr("id AS key", "id * 3 AS a", "id * 0.5 AS b")
    return OperatorTransformation.bootstrap_with(df).key_by("key").columns(
        ValueStateDescriptor("a", "bigint"), ValueStateDescriptor("b", "double"))


# name: (transformation, rows, format); each writes well over the 4 MiB disk
BOOTSTRAPS = {
    "statekit-columnar": (_columnar, 40_000, "statekit"),        # spark/parts.py
    "statekit-function": (_function, 40_000, "statekit"),        # spark/parts.py, a Python function per row
    "flink-columnar": (_fixed_width, 600_000, "flink"),          # spark/flink_columnar.py
    "flink-strings": (_columnar, 40_000, "flink"),               # spark/flink_writer.py
}


def _space_released(disk: Path, limit: int = 1 << 20, wait_s: float = 60.0) -> bool:
    """Whether the disk's used space falls under `limit` within `wait_s`.

    Spark fails a job as soon as one task fails; its other tasks are cancelled asynchronously and may
    still hold files the driver already unlinked, so their space is freed only when those tasks end.
    """
    deadline = time.monotonic() + wait_s
    while shutil.disk_usage(disk).used >= limit:
        if time.monotonic() > deadline:
            return False
        time.sleep(0.2)
    return True


def _leftovers(disk: Path) -> list[str]:
    return sorted(p.name for p in disk.iterdir() if p.name != "lost+found")


@pytest.mark.parametrize("case", sorted(BOOTSTRAPS))
def test_bootstrap_onto_a_full_disk_raises_storage_full(spark, small_disk, case):
    make, rows, fmt = BOOTSTRAPS[case]
    disk = small_disk("4m")
    with pytest.raises(StorageFullError, match="no space left"):
        SavepointWriter.new_savepoint(spark, max_parallelism=128).with_operator("op", make(spark, rows)).write(
            disk / "sp", format=fmt)
    assert _leftovers(disk) == []
    assert _space_released(disk)


@pytest.fixture(scope="module")
def source(tmp_path_factory) -> Path:
    """A statekit savepoint of ~10 MiB of distinct strings (payload state), written locally."""
    import hashlib

    path = tmp_path_factory.mktemp("disk-full") / "src"
    n = 20_000
    payload = ["".join(hashlib.sha256(str(i * 8 + j).encode()).hexdigest() for j in range(8)) for i in range(n)]
    with SavepointBuilder(path, rows_per_file=5_000) as b:
        op = b.add_operator("op", parallelism=2, max_parallelism=128, key_type="bigint", keyed_states=[PAYLOAD])
        op.write_keyed(pa.table({"key": pa.array(range(n), pa.int64()), "payload": payload}))
    return path


# name: (what the writer does to the source, format)
REWRITES = {
    "statekit-rehash": (lambda w: w.with_max_parallelism("op", 256), "statekit"),   # spark/parts.py (rehash)
    "statekit-rekey": (lambda w: w.rekey("op", "key + 1"), "statekit"),             # spark/parts.py (rekey)
    "flink-rename": (lambda w: w.change_operator_identifier("op", "op2"), "flink"),  # spark/flink_writer.py
}


@pytest.mark.parametrize("case", sorted(REWRITES))
def test_rewrite_onto_a_full_disk_raises_storage_full_and_keeps_the_source(spark, small_disk, source, case):
    change, fmt = REWRITES[case]
    before = tree_digest(source)
    disk = small_disk("4m")
    with pytest.raises(StorageFullError, match="no space left"):
        change(SavepointWriter.from_existing_savepoint(spark, str(source))).write(disk / "sp", format=fmt)
    assert _leftovers(disk) == []
    assert tree_digest(source) == before and check(source).ok
    # the same write with room succeeds: the failure was the disk's, nothing else
    out = change(SavepointWriter.from_existing_savepoint(spark, str(source))).write(source.parent / f"ok-{case}",
                                                                                    format=fmt)
    assert Savepoint.open(out).keyed_table(Savepoint.open(out).operators[0].identifier).num_rows == 20_000
