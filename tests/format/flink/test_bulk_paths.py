"""The direct bulk paths (strided views for Long keys, the proven scan for String keys) read exactly what was written."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pytest

from statekit.savepoint import Savepoint, SavepointBuilder
from statekit.savepoint.flink_out import write_flink
from statekit.state import ValueStateDescriptor

N = 3000  # enough entries per key group for strided runs


def _flink_savepoint(tmp_path: Path, keys: list, key_type: str) -> Path:
    """A Flink savepoint written by statekit: two ValueState<bigint> over `keys` (a = i, b = 2i + 1)."""
    src = tmp_path / "sk"
    with SavepointBuilder(src) as b:
        op = b.add_operator("bench", parallelism=2, max_parallelism=128, key_type=key_type,
                            keyed_states=[ValueStateDescriptor("a", "bigint"), ValueStateDescriptor("b", "bigint")])
        op.write_keyed(pa.table({"key": pa.array(keys, pa.int64() if key_type == "bigint" else pa.string()),
                                 "a": pa.array(range(len(keys)), pa.int64()),
                                 "b": pa.array([2 * i + 1 for i in range(len(keys))], pa.int64())}))
    return write_flink(src, tmp_path / "flink")


def _check(path: Path, keys: list) -> str:
    sp = Savepoint.open(path)
    got = sp.keyed_table("bench")
    assert got.column_names == ["key", "a", "b"]
    rows = {r["key"]: (r["a"], r["b"]) for r in got.to_pylist()}
    assert len(rows) == got.num_rows == len(keys)
    assert rows == {k: (i, 2 * i + 1) for i, k in enumerate(keys)}
    return sp.stats.describe()


def test_long_keys_take_the_strided_view(tmp_path: Path) -> None:
    keys = list(range(N))
    stats = _check(_flink_savepoint(tmp_path, keys, "bigint"), keys)
    assert "a: strided-view" in stats and "key: strided-view" in stats and "rows: direct" in stats, stats


@pytest.mark.parametrize("extra", [[], ["x" * 127, "y" * 300, "", "k" * 13]], ids=["short", "long-and-empty"])
def test_string_keys_take_the_scan_and_bulk_strings(tmp_path: Path, extra: list) -> None:
    keys = [f"key-{i}" for i in range(N)] + extra
    stats = _check(_flink_savepoint(tmp_path, keys, "string"), keys)
    assert " scanned" in stats and "key: bulk" in stats and "a: bulk" in stats and "rows: direct" in stats, stats


def test_non_ascii_string_keys_fall_back_to_records(tmp_path: Path) -> None:
    keys = [f"key-{i}" for i in range(200)] + ["über", "日本"]
    stats = _check(_flink_savepoint(tmp_path, keys, "string"), keys)
    assert "key: per-record" in stats and "rows: direct" in stats, stats


def test_a_whole_process_read_does_not_import_pandas(tmp_path: Path) -> None:
    path = _flink_savepoint(tmp_path, list(range(N)), "bigint")
    code = (f"import sys; from statekit.savepoint import Savepoint; sp = Savepoint.open({str(path)!r}); "
            "t = sp.keyed_table('bench'); assert t.num_rows == 3000; sp.get('bench', 7); "
            "assert 'pandas' not in sys.modules, 'pandas was imported'")
    subprocess.run([sys.executable, "-c", code], check=True)
