"""Arrow-owned memory: buffers Arrow may free on any thread, even while the interpreter exits.

An Arrow buffer that wraps Python memory (``pa.py_buffer(bytes)``, ``pa.BufferReader(bytes)``, a
NumPy array converted without a copy) holds a Python object, and freeing it takes the GIL. Arrow
frees a buffer wherever its last reference goes: often on one of its own pool threads (a Parquet
read's pre-buffering, a dataset scan's fragment, an Acero plan, DuckDB's scan of an Arrow table),
a moment after the call that used it returned. If that moment falls while the interpreter
finalizes, the pool thread cannot take the GIL, is unwound, and the process aborts with
``terminate called without an active exception`` (SIGABRT) after all its work succeeded.

So every buffer statekit builds from bytes or NumPy arrays and hands on is copied into memory
Arrow allocated (`owned_buffer`, `owned_array`), and files are read straight into such memory
(`statekit.format.files.verify_file`). The copy is one ``memcpy``; the tables stay the same.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

__all__ = ["owned_array", "owned_buffer"]


def owned_buffer(data: bytes | bytearray | memoryview | np.ndarray) -> pa.Buffer:
    """A copy of `data` in memory allocated by Arrow's pool (no Python object behind it).

    >>> owned_buffer(b"abc").to_pybytes()
    b'abc'
    """
    if isinstance(data, np.ndarray):
        data = np.ascontiguousarray(data)
    view = memoryview(data).cast("B")
    buf = pa.allocate_buffer(view.nbytes)
    if view.nbytes:
        memoryview(buf).cast("B")[:] = view  # Arrow's buffers export signed bytes ("b")
    return buf


def owned_array(values: np.ndarray, type: pa.DataType | None = None) -> pa.Array:
    """``pa.array(values, type)`` for a NumPy array, always over Arrow-owned memory.

    ``pa.array`` wraps a NumPy array of numbers without copying (the array then keeps the NumPy
    object alive); booleans and conversions to another type are new Arrow buffers already.

    >>> owned_array(np.arange(3, dtype=np.int64), pa.int32()).to_pylist()
    [0, 1, 2]
    """
    values = np.asarray(values)
    if values.dtype.kind not in "iuf" or values.ndim != 1:
        return pa.array(values, type)
    native = values.dtype.newbyteorder("=")
    data = owned_buffer(values.astype(native, copy=False))
    arr = pa.Array.from_buffers(pa.from_numpy_dtype(native), len(values), [None, data])
    return arr if type is None or arr.type == type else arr.cast(type)
