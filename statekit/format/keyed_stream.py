"""An operator's keyed table read lazily, one verified Parquet file at a time, in key-group order (for bulk writers).

A bulk writer (the Flink writer of `statekit.format.flink.regular_out`) needs the rows of one key-group
range at a time, sorted by key group. Reading the whole table first costs a full decoded copy of the
state (and the allocations that go with it) before the first byte is written; `KeyedFiles` instead
hands over one file's rows at a time, the next file read and decoded on a helper thread while the
caller encodes the current one (zlib's CRC-32, Parquet decoding and numpy all release the GIL).
Every file is checksummed whole before any of it is decoded, as `read_parquet_verified` does, and
the statekit format's ordering promise (rows grouped by ascending key group inside the file's
declared range) is checked on the rows read, so a damaged file cannot produce misplaced output.
"""

from __future__ import annotations

from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Callable, Iterator, Sequence

import numpy as np
import pyarrow as pa

from statekit.errors import CorruptSavepointError
from statekit.format.arrow_memory import to_numpy
from statekit.format.files import read_parquet_verified
from statekit.format.manifest import FileEntry

#: files read ahead of the one being consumed
READ_AHEAD = 1


class KeyedFiles:
    """The keyed files of one operator (pairwise disjoint key-group ranges), read range by range.

    `schema` is the keyed table's schema (with ``key_group``); `check(table, where)` validates a file's
    table against it (casting where the format allows, `SchemaMismatchError` otherwise), as the
    savepoint reader does; `table()` is the whole keyed table, for writers without a bulk path.
    """

    def __init__(self, root: Path, entries: Sequence[FileEntry], schema: pa.Schema,
                 check: Callable[[pa.Table, str], pa.Table], table: Callable[[], pa.Table]) -> None:
        self.root = root
        self.entries = sorted(entries, key=lambda e: (e.key_group_start, e.key_group_end))
        self.schema = schema
        self.num_rows = sum(e.rows for e in entries)
        self._check = check
        self._table = table

    @classmethod
    def of(cls, root: Path, entries: Sequence[FileEntry], schema: pa.Schema,
           check: Callable[[pa.Table, str], pa.Table], table: Callable[[], pa.Table]) -> "KeyedFiles | None":
        """The files as a `KeyedFiles`, or None when their key-group ranges are missing or overlap (several
        files then share key groups, and only a whole-table read orders their rows)."""
        entries = [e for e in entries if e.rows]
        if any(e.key_group_start is None or e.key_group_end is None for e in entries):
            return None
        ranges = sorted((int(e.key_group_start), int(e.key_group_end)) for e in entries)  # type: ignore[arg-type]
        if any(ranges[i + 1][0] <= ranges[i][1] for i in range(len(ranges) - 1)):
            return None
        return cls(root, entries, schema, check, table)

    def table(self) -> pa.Table:
        """The whole keyed table (``key_group`` first), read as the savepoint reader reads it."""
        return self._table()

    def batches(self, start: int, end: int) -> Iterator[pa.Table]:
        """The rows of key groups [start, end], file by file in key-group order, each table sorted by key group."""
        todo = [e for e in self.entries if e.key_group_start <= end and e.key_group_end >= start]  # type: ignore[operator]
        if not todo:
            return
        with ThreadPoolExecutor(1, thread_name_prefix="statekit-keyed-read") as pool:
            pending: deque[Future[pa.Table]] = deque()
            it = iter(todo)
            try:
                for e in it:
                    pending.append(pool.submit(self._read, e, start, end))
                    if len(pending) > READ_AHEAD:
                        break
                while pending:
                    table = pending.popleft().result()
                    nxt = next(it, None)
                    if nxt is not None:
                        pending.append(pool.submit(self._read, nxt, start, end))
                    if table.num_rows:
                        yield table
            finally:
                for f in pending:
                    f.cancel()

    def _read(self, e: FileEntry, start: int, end: int) -> pa.Table:
        assert e.key_group_start is not None and e.key_group_end is not None
        whole = start <= e.key_group_start and e.key_group_end <= end
        table = read_parquet_verified(self.root, e, key_groups=None if whole else (start, end))
        if whole and table.num_rows != e.rows:
            raise CorruptSavepointError(
                f"{self.root}: file {e.path} holds {table.num_rows} rows but the manifest recorded {e.rows}; "
                "the manifest does not describe this file. Restore the savepoint or use another one."
            )
        table = self._check(table, f"file {e.path}")
        if not table.num_rows:
            return table
        kg = to_numpy(table.column("key_group"))
        if (kg[1:] < kg[:-1]).any() or kg[0] < e.key_group_start or kg[-1] > e.key_group_end:
            raise CorruptSavepointError(
                f"{self.root}: file {e.path} does not hold its rows grouped by ascending key group within its "
                f"declared range [{e.key_group_start}, {e.key_group_end}]; the savepoint is damaged (`statekit "
                "check` reports it as wrong_key_group). Restore the file or use another savepoint."
            )
        if whole:
            return table
        lo, hi = np.searchsorted(kg, [start, end + 1])
        return table.slice(int(lo), int(hi - lo))


__all__ = ["KeyedFiles", "READ_AHEAD"]
