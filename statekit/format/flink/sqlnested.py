"""Nested SQL fields (ARRAY, MAP, MULTISET, ROW) of written `BinaryRowData` rows: one column's slots and variable-part pieces.

Boundary: the nested branch of `sqlwrite.row_bytes`. Nested values are irregular, so each one is
encoded per record by `rowdata.encode_nested` (the one home of Flink's `BinaryArrayData` /
`BinaryMapData` / nested `BinaryRowData` layouts, `../shared/flink/sql/SQL-FORMAT.md`), and placed as
`AbstractBinaryWriter.writeSegmentsToVarLen` places it: the slot is ``offset << 32 | length`` (the
unpadded length), the bytes go to the variable part zero-padded to whole 8-byte words.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from statekit.errors import InvalidArgumentError, StateTypeError
from statekit.format.flink.encoded import Encoded
from statekit.format.flink.logical import LogicalType
from statekit.format.flink.rowdata import encode_nested

__all__ = ["NESTED", "nested_field"]

#: the type roots this module writes
NESTED = ("ARRAY", "MAP", "MULTISET", "ROW")


def nested_field(arr: pa.Array, t: LogicalType, isnull: np.ndarray, var_at: np.ndarray,
                 what: str) -> tuple[np.ndarray, Encoded]:
    """(the n 8-byte slots as uint64, the variable-part pieces) of nested field `arr` of type `t`; `var_at` is
    where each row's piece starts (bytes from the row start), NULL rows get a zeroed slot and no piece.

    Raises
    ------
    StateTypeError
        If a value does not fit `t` (the field in `what`, the value and the type named).
    """
    n = len(arr)
    parts: list[bytes] = []
    for i, v in enumerate(arr.to_pylist()):
        if isnull[i] or v is None:
            parts.append(b"")
            continue
        try:
            parts.append(encode_nested(v, t))
        except InvalidArgumentError as e:
            raise StateTypeError(f"{what}: {e}.") from None
    lengths = np.fromiter((len(p) for p in parts), np.int64, n)
    slots = np.where(isnull, np.uint64(0), (var_at.astype(np.uint64) << np.uint64(32)) | lengths.astype(np.uint64))
    padded = (lengths + 7) // 8 * 8
    offsets = np.zeros(n + 1, np.int64)
    np.cumsum(padded, out=offsets[1:])
    data = np.frombuffer(b"".join(p.ljust(int(w), b"\0") for p, w in zip(parts, padded)), np.uint8)
    return slots.astype(np.uint64), Encoded(data.copy(), offsets)
