"""`write_parquet` streams pages into the file: its size and checksum are the file's, and a failed write leaves no file."""

from __future__ import annotations

import errno
import zlib
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from statekit.format import files


def _table(n: int) -> pa.Table:
    return pa.table({"key_group": pa.array([i * 128 // n for i in range(n)], pa.int32()),
                     "key": [f"key-{i}" for i in range(n)], "v": pa.array(range(n), pa.int64())})


@pytest.mark.parametrize("n", [0, 1, 300_000])
def test_size_and_checksum_are_those_of_the_bytes_on_disk(tmp_path: Path, n: int) -> None:
    table = _table(n)
    path = tmp_path / "a" / "part.parquet"
    size, digest = files.write_parquet(table, path)
    data = path.read_bytes()
    assert size == len(data) and digest == f"crc32:{zlib.crc32(data):08x}"
    assert pq.read_table(path).equals(table)
    if n:  # row groups cut where key groups change, as before the streaming
        bounds = files.row_group_bounds(table.column("key_group").to_numpy(), files.ROW_GROUP_ROWS)
        assert pq.ParquetFile(path).metadata.num_row_groups == len(bounds) == (1 if n == 1 else 3)


def test_a_write_failing_midway_removes_the_file_and_raises_the_cause(tmp_path: Path, monkeypatch) -> None:
    written = [0]
    real_write = files._ChecksummedFile.write

    def failing(self, data):
        written[0] += len(data)
        if written[0] > 100_000:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_write(self, data)

    monkeypatch.setattr(files._ChecksummedFile, "write", failing)
    path = tmp_path / "part.parquet"
    with pytest.raises(OSError) as info:
        files.write_parquet(_table(300_000), path)
    assert info.value.errno == errno.ENOSPC
    assert not path.exists() and list(tmp_path.iterdir()) == []
