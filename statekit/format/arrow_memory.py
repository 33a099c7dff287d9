"""Arrow arrays built from numpy in Arrow-owned memory: no pandas import, and nothing Python-backed for Arrow to free at exit.

Why not ``pa.array(ndarray)``: pyarrow 26 imports pandas on the first ``pa.array`` (and
``to_numpy``), which costs a fresh process ~0.3 s; and a zero-copy array over a numpy buffer
needs the GIL when Arrow frees it, which an Arrow pool thread cannot take during interpreter
shutdown (see `statekit.format.files.read_verified`). Here numpy only ever writes *into* memory
Arrow allocated (`allocate`), and the Arrow array is made over that buffer.

Why the system allocator (`POOL`) rather than Arrow's default (mimalloc): column-sized buffers are
fresh memory, and mimalloc's come from transparent huge pages, whose first touch on this machine
kind runs the kernel's compaction: ~3 ms of system time per MB, against ~0.5 ms for malloc's
ordinary pages (a 10M-key Flink read spent more time there than decoding). Both are Arrow-owned.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator

import numpy as np
import pyarrow as pa

_TYPES = {
    np.dtype(np.int8): pa.int8(), np.dtype(np.int16): pa.int16(), np.dtype(np.int32): pa.int32(),
    np.dtype(np.int64): pa.int64(), np.dtype(np.uint8): pa.uint8(), np.dtype(np.uint16): pa.uint16(),
    np.dtype(np.uint32): pa.uint32(), np.dtype(np.uint64): pa.uint64(), np.dtype(np.float32): pa.float32(),
    np.dtype(np.float64): pa.float64(),
}


#: where `allocate` and `copy_buffer` take memory (see the module docstring); pass it to Arrow kernels
#: that build large outputs (``cast(..., memory_pool=POOL)``)
POOL = pa.system_memory_pool()


_pages_lock = threading.Lock()
_pages_users = [0, True]  # [readers inside small_pages(), numpy's setting before the first]


@contextlib.contextmanager
def small_pages() -> Iterator[None]:
    """numpy's large arrays on ordinary pages while inside (restored after the last concurrent user leaves).

    numpy asks for transparent huge pages for arrays of 4 MB or more; a bulk decoder's scratch arrays
    are fresh, short-lived memory, whose huge pages cost kernel compaction on first touch (see `POOL`).
    A no-op where numpy has no such switch.
    """
    core = getattr(np, "_core", None) or getattr(np, "core", None)
    switch = getattr(getattr(core, "multiarray", None), "_set_madvise_hugepage", None)
    if switch is None:
        yield
        return
    with _pages_lock:
        if _pages_users[0] == 0:
            _pages_users[1] = switch(False)
        _pages_users[0] += 1
    try:
        yield
    finally:
        with _pages_lock:
            _pages_users[0] -= 1
            if _pages_users[0] == 0:
                switch(_pages_users[1])


def arrow_type(dtype: np.dtype) -> pa.DataType:
    """The Arrow type of a numpy number dtype (any byte order)."""
    return _TYPES[np.dtype(dtype).newbyteorder("=")]


def allocate(n: int, dtype: np.dtype | str | type) -> tuple[np.ndarray, pa.Buffer]:
    """A writable numpy array of `n` items over a new Arrow buffer (contents undefined), and that buffer."""
    dt = np.dtype(dtype).newbyteorder("=")
    buf = pa.allocate_buffer(max(n * dt.itemsize, 1), memory_pool=POOL)
    return np.frombuffer(buf, dt, count=n), buf


def primitive(buf: pa.Buffer, n: int, type_: pa.DataType) -> pa.Array:
    """The fixed-width Arrow array of `n` values over `buf` (from `allocate`), no nulls."""
    return pa.Array.from_buffers(type_, n, [None, buf])


def from_numpy(values: np.ndarray, type_: pa.DataType | None = None) -> pa.Array:
    """`values` (1-D numbers or bools, no nulls) copied once into Arrow memory, as an Arrow array of `type_`."""
    values = np.asarray(values)
    if values.dtype == np.bool_:
        bits = np.packbits(values, bitorder="little")
        out, buf = allocate(len(bits), np.uint8)
        out[:] = bits
        return pa.Array.from_buffers(pa.bool_(), len(values), [None, buf])
    t = type_ if type_ is not None else arrow_type(values.dtype)
    out, buf = allocate(len(values), np.dtype(t.to_pandas_dtype()) if type_ is not None else values.dtype)
    out[:] = values
    return primitive(buf, len(values), t)


def copy_buffer(data: bytes | bytearray | memoryview | np.ndarray) -> pa.Buffer:
    """`data` copied into a new Arrow buffer: what `pa.Array.from_buffers` gets instead of ``pa.py_buffer(data)``.

    >>> copy_buffer(b"abc").to_pybytes()
    b'abc'
    """
    src = np.frombuffer(data, np.uint8) if not isinstance(data, np.ndarray) else \
        np.ascontiguousarray(data).reshape(-1).view(np.uint8)
    out, buf = allocate(len(src), np.uint8)
    out[:] = src
    return buf


def to_numpy(arr: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """The values of a fixed-width Arrow array without nulls as numpy (zero-copy for one chunk), without pandas."""
    if isinstance(arr, pa.ChunkedArray):
        parts = [to_numpy(c) for c in arr.chunks]
        dt = np.dtype(arr.type.to_pandas_dtype())
        return np.concatenate(parts) if parts else np.zeros(0, dt)
    if arr.null_count:
        raise ValueError("to_numpy: array has nulls")
    dt = np.dtype(arr.type.to_pandas_dtype())
    if arr.type == pa.bool_():
        bits = np.frombuffer(arr.buffers()[1], np.uint8)
        return np.unpackbits(bits, count=arr.offset + len(arr), bitorder="little")[arr.offset:].astype(bool)
    return np.frombuffer(arr.buffers()[1], dt, count=arr.offset + len(arr))[arr.offset:]


def empty_table(schema: pa.Schema) -> pa.Table:
    """A table of `schema` with no rows (``Schema.empty_table`` imports pandas)."""
    return pa.Table.from_batches([], schema=schema)


def as_schema(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """`table.cast(schema)`, without a cast where only nullability (or nothing) differs: the columns kept as they are.

    Why: a table's first ``cast`` imports ``pyarrow.compute`` (~0.2 s of a fresh process), and a decoded keyed
    table usually differs from its declared schema only in the ``not null`` of its key columns.
    """
    if table.schema.equals(schema, check_metadata=True):
        return table
    if table.schema.names == schema.names and all(
            a.type == f.type and (f.nullable or c.null_count == 0) for a, f, c in zip(table.schema, schema, table.columns)):
        return pa.Table.from_arrays(table.columns, schema=schema)
    return table.cast(schema)
