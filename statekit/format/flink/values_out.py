"""Arrow columns encoded as Flink serializer bytes in bulk: numpy over whole columns, per record only for irregular values.

Boundary: the write side of `values`. `encode(array, flink_type)` gives every value's bytes as one
`Encoded` (a byte buffer plus n+1 offsets); `concat` joins encodings row by row, which is how
tuples, rows, POJOs, keyed entries and list runs are assembled without a Python call per value.
Encodings: section 3.6a of `../shared/flink/FORMAT.md` (`StringValue`, `RowSerializer`, ...).
"""

from __future__ import annotations

import struct

import numpy as np
import pyarrow as pa

from statekit.errors import StateTypeError
from statekit.format.flink.serializers import FlinkType

_FIXED = {"long": ">i8", "int": ">i4", "short": ">i2", "byte": "i1", "double": ">f8", "float": ">f4"}
SCATTER_CHUNK = 1 << 22  # bytes per scatter step (bounds the temporary index arrays)


class Encoded:
    """n encoded values: value i is ``data[offsets[i]:offsets[i+1]]``.

    Fixed-width encodings (`width` set) keep only their bytes (offsets are computed when asked for),
    and a constant (`const`) keeps only its one value, so fixed-width rows are assembled with one
    strided copy per part.
    """

    __slots__ = ("_data", "width", "const", "n", "_offsets")

    def __init__(self, data: np.ndarray, offsets: np.ndarray | None = None, width: int | None = None, *,
                 n: int | None = None, const: bytes | None = None) -> None:
        self._data, self.width, self.const, self._offsets = data, width, const, offsets
        if n is None:
            n = len(offsets) - 1 if offsets is not None else (len(data) // width if width else 0)
        self.n = n

    def __len__(self) -> int:
        return self.n

    @property
    def data(self) -> np.ndarray:
        """The bytes of all values, back to back (a constant is repeated here on first use)."""
        if self.const is not None and len(self._data) != self.n * len(self.const):
            self._data = np.tile(np.frombuffer(self.const, np.uint8), self.n)
        return self._data

    @property
    def offsets(self) -> np.ndarray:
        if self._offsets is None:
            self._offsets = np.arange(self.n + 1, dtype=np.int64) * (self.width or 0)
        return self._offsets

    @property
    def lengths(self) -> np.ndarray:
        if self.width is not None:
            return np.full(self.n, self.width, np.int64)
        return np.diff(self.offsets)

    def materialized(self) -> "Encoded":
        if self.const is None:
            return self
        return Encoded(self.data, None, self.width, n=self.n)

    @staticmethod
    def fixed(matrix: np.ndarray) -> "Encoded":
        n, w = matrix.shape
        return Encoded(np.ascontiguousarray(matrix).reshape(-1), None, w, n=n)

    @staticmethod
    def constant(value: bytes, n: int) -> "Encoded":
        return Encoded(np.zeros(0, np.uint8), None, len(value), n=n, const=bytes(value))

    @staticmethod
    def from_list(values: list[bytes]) -> "Encoded":
        lengths = np.fromiter((len(v) for v in values), np.int64, len(values))
        offsets = np.zeros(len(values) + 1, np.int64)
        np.cumsum(lengths, out=offsets[1:])
        return Encoded(np.frombuffer(b"".join(values), np.uint8), offsets)

    def take(self, idx: np.ndarray) -> "Encoded":
        """The values at `idx`, in that order."""
        if self.const is not None:
            return Encoded.constant(self.const, len(idx))
        if self.width is not None:
            return Encoded.fixed(self.data.reshape(-1, self.width)[idx]) if self.width else \
                Encoded(self.data[:0], None, 0, n=len(idx))
        lengths = self.lengths[idx]
        return Encoded(_gather(self.data, self.offsets[:-1][idx], lengths), _offsets(lengths))


def _offsets(lengths: np.ndarray) -> np.ndarray:
    out = np.zeros(len(lengths) + 1, np.int64)
    np.cumsum(lengths, out=out[1:])
    return out


def _gather(data: np.ndarray, starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Ranges [starts[i], starts[i]+lengths[i]) of `data` concatenated."""
    total = int(lengths.sum())
    out = np.empty(total, np.uint8)
    dst = _offsets(lengths)
    _scatter(out, dst[:-1], data, starts, lengths)
    return out


def _scatter(out: np.ndarray, dst: np.ndarray, src: np.ndarray, src_starts: np.ndarray, lengths: np.ndarray) -> None:
    """Copy ranges: ``out[dst[i]:dst[i]+len[i]] = src[src_starts[i]:...]``, vectorised in chunks."""
    n = len(lengths)
    i = 0
    while i < n:
        # take rows until about SCATTER_CHUNK bytes
        cum = np.cumsum(lengths[i : i + SCATTER_CHUNK])
        j = i + max(1, int(np.searchsorted(cum, SCATTER_CHUNK, side="right")))
        ln = lengths[i:j]
        m = int(ln.sum())
        if m:
            rows = np.repeat(np.arange(j - i), ln)
            within = np.arange(m, dtype=np.int64) - np.repeat(_offsets(ln)[:-1], ln)
            out[dst[i:j][rows] + within] = src[src_starts[i:j][rows] + within]
        i = j


def concat(parts: list[Encoded]) -> Encoded:
    """Row-wise concatenation: value i of the result is part0[i] + part1[i] + ..."""
    n = len(parts[0])
    if any(len(p) != n for p in parts):
        raise ValueError("parts of different lengths")
    if all(p.width is not None for p in parts):
        return _concat_fixed(parts, n)
    parts = [p.materialized() for p in parts]
    lengths = np.zeros(n, np.int64)
    for p in parts:
        lengths += p.lengths
    offsets = _offsets(lengths)
    out = np.empty(int(offsets[-1]), np.uint8)
    at = offsets[:-1].copy()
    for p in parts:
        if p.width is not None:
            if p.width:
                idx = at[:, None] + np.arange(p.width)
                out[idx] = p.data.reshape(n, p.width)
                at += p.width
            continue
        ln = p.lengths
        _scatter(out, at, p.data, p.offsets[:-1], ln)
        at += ln
    return Encoded(out, offsets)


def _concat_fixed(parts: list[Encoded], n: int) -> Encoded:
    """Fixed-width parts side by side: one strided copy per part (each row part is one numpy void element)."""
    widths = [p.width or 0 for p in parts]
    total = sum(widths)
    used = [(p, w, off) for p, w, off in zip(parts, widths, np.cumsum([0] + widths[:-1]).tolist()) if w]
    dt = np.dtype({"names": [f"f{i}" for i in range(len(used))], "formats": [f"V{w}" for _, w, _ in used],
                   "offsets": [off for _, _, off in used], "itemsize": total})
    out = np.empty(n, dt)
    for i, (p, w, _) in enumerate(used):
        if p.const is not None:
            out[f"f{i}"] = np.void(p.const)
        else:
            out[f"f{i}"] = np.ascontiguousarray(p.data).view(f"V{w}")
    return Encoded(out.view(np.uint8).reshape(-1) if n else np.zeros(0, np.uint8), None, total, n=n)


def join_runs(elements: Encoded, counts: np.ndarray, sep: bytes | None, prefix_count: bool) -> Encoded:
    """Group consecutive `elements` into runs of `counts`: optionally ``i32 count`` first, `sep` between elements."""
    n_el = len(elements)
    firsts = _offsets(counts)
    if sep is not None and n_el:
        last = np.zeros(n_el, bool)
        ends = firsts[1:][counts > 0] - 1
        last[ends] = True
        seps = np.where(last, 0, len(sep)).astype(np.int64)
        sep_enc = Encoded(np.frombuffer(sep * n_el, np.uint8), _offsets(seps))
        elements = concat([elements, sep_enc])
    lengths = np.add.reduceat(elements.lengths, firsts[:-1]) if n_el else np.zeros(len(counts), np.int64)
    lengths = np.where(counts > 0, lengths, 0)
    body = Encoded(elements.data, _offsets(lengths))
    if prefix_count:
        return concat([Encoded.fixed(counts.astype(">i4").view(np.uint8).reshape(-1, 4)), body])
    return body


# -- per type ------------------------------------------------------------------------------------------
def encode(arr: pa.Array | pa.ChunkedArray, t: FlinkType, *, what: str = "a value") -> Encoded:
    """The bytes Flink's serializer for `t` writes for each (non-null, unless `t` allows it) value."""
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks() if arr.num_chunks != 1 else arr.chunk(0)
    k = t.kind
    n = len(arr)
    if k in ("tuple", "list", "map", "long", "int", "short", "byte", "double", "float", "boolean", "char", "string",
             "bytes", "enum", "window", "void") and arr.null_count:
        if k != "string":
            raise StateTypeError(f"{what}: a null {t.serializer} value; Flink's serializer cannot write nulls there.")
    if k in _FIXED:
        np_arr = arr.to_numpy(zero_copy_only=False).astype(_FIXED[k])
        return Encoded.fixed(np_arr.view(np.uint8).reshape(n, -1))
    if k == "boolean":
        return Encoded.fixed(arr.to_numpy(zero_copy_only=False).astype(np.uint8).reshape(n, 1))
    if k == "void":
        return Encoded.constant(b"\x00", n)
    if k == "string":
        return _strings(arr, what)
    if k == "bytes" and t.form == "row":  # a Flink SQL BinaryRowData
        from statekit.format.flink import sqlwrite  # here: DataStream writes never load the SQL encoders

        return sqlwrite.encode_serialized(arr, t, what=what)
    if k in ("bytes", "binary"):
        arr = arr.cast(pa.large_binary())
        offs = np.frombuffer(arr.buffers()[1], np.int64, n + 1, arr.offset * 8).astype(np.int64)
        data = np.frombuffer(arr.buffers()[2], np.uint8) if arr.buffers()[2] is not None else np.zeros(0, np.uint8)
        raw = Encoded(data[offs[0] : offs[-1]], offs - offs[0])
        if k == "binary":  # opaque (Kryo, Avro...): the column holds the serializer's bytes as they were
            if arr.null_count:
                raise StateTypeError(f"{what}: a null value of opaque serializer {t.serializer}.")
            return raw
        lengths = raw.lengths.astype(">i4").view(np.uint8).reshape(-1, 4)
        return concat([Encoded.fixed(lengths), raw])
    if k == "window":
        import pyarrow.compute as pc  # here: writers of other layouts start without it

        s = pc.struct_field(arr, "start").to_numpy(zero_copy_only=False).astype(">i8")
        e = pc.struct_field(arr, "end").to_numpy(zero_copy_only=False).astype(">i8")
        return Encoded.fixed(np.concatenate([s.view(np.uint8).reshape(n, 8), e.view(np.uint8).reshape(n, 8)], axis=1))
    if k == "list":
        arr = arr.cast(pa.large_list(arr.type.value_type))
        flat = arr.flatten()
        counts = np.diff(np.frombuffer(arr.buffers()[1], np.int64, n + 1, arr.offset * 8))
        return join_runs(encode(flat, t.children[0], what=what), counts, None, True)
    if k == "map":
        offs = arr.offsets.to_numpy()
        counts = np.diff(offs)
        lo, hi = int(offs[0]), int(offs[-1])  # .keys / .items ignore the array's slice
        kv = concat([encode(arr.keys.slice(lo, hi - lo), t.children[0], what=what),
                     nullable_values(arr.items.slice(lo, hi - lo), t.children[1], what)])
        return join_runs(kv, counts, None, True)
    if k in ("tuple", "row", "pojo"):
        return _struct(arr, t, what)
    if k == "enum":
        idx = {v: i for i, v in enumerate(t.enum_values)}
        try:
            ordinals = np.array([idx[v] for v in arr.to_pylist()], ">i4")
        except KeyError as exc:
            raise StateTypeError(f"{what}: {exc.args[0]!r} is not a constant of enum {t.type_class}.") from None
        return Encoded.fixed(ordinals.view(np.uint8).reshape(n, 4))
    if k == "avro":
        from statekit.format.flink import avro_out  # here: only Avro states need it

        return avro_out.encode_column(arr, t.avro, what=what)
    if k == "char":
        vals = np.array([ord(c) for c in arr.to_pylist()], ">u2")
        return Encoded.fixed(vals.view(np.uint8).reshape(n, 2))
    raise StateTypeError(f"{what}: values of serializer {t.serializer} cannot be written by statekit.")


def nullable_values(arr: pa.Array, t: FlinkType, what: str) -> Encoded:
    """MapSerializer values: ``bool isNull`` then the value when present."""
    n = len(arr)
    isnull = arr.is_null().to_numpy(zero_copy_only=False)
    if not isnull.any():
        return concat([Encoded.constant(b"\x00", n), encode(arr, t, what=what)])
    ok = np.flatnonzero(~isnull)
    present = encode(arr.take(pa.array(ok)), t, what=what)
    lengths = np.zeros(n, np.int64)
    lengths[ok] = present.lengths
    body = Encoded(present.data, _offsets(lengths))
    return concat([Encoded.fixed(isnull.astype(np.uint8).reshape(n, 1)), body])


def _strings(arr: pa.Array, what: str) -> Encoded:
    """`StringValue.writeString`; ASCII strings shorter than 127 chars in bulk, the rest per record."""
    n = len(arr)
    arr = arr.cast(pa.large_string())
    offs = np.frombuffer(arr.buffers()[1], np.int64, n + 1, arr.offset * 8).astype(np.int64)
    data = np.frombuffer(arr.buffers()[2], np.uint8) if arr.buffers()[2] is not None else np.zeros(0, np.uint8)
    data = data[offs[0] : offs[-1]]
    offs = offs - offs[0]
    lengths = np.diff(offs)
    if not arr.null_count and (n == 0 or lengths.max() < 127) and (len(data) == 0 or data.max() < 0x80):
        head = Encoded.fixed((lengths + 1).astype(np.uint8).reshape(n, 1))
        return concat([head, Encoded(data, offs)])
    return Encoded.from_list([java_string_bytes(v) for v in arr.to_pylist()])


def _varint(v: int) -> bytes:
    out = bytearray()
    while v >= 0x80:
        out.append(v & 0x7F | 0x80)
        v >>= 7
    out.append(v)
    return bytes(out)


def java_string_bytes(s: str | None) -> bytes:
    """One `StringValue.writeString` (None = the null string, ``00``)."""
    if s is None:
        return b"\x00"
    units = s.encode("utf-16-be", "surrogatepass")
    n = len(units) // 2
    if s.isascii():
        return _varint(n + 1) + s.encode("ascii")
    return _varint(n + 1) + b"".join(_varint(u) for (u,) in struct.iter_unpack(">H", units))


def _struct(arr: pa.Array, t: FlinkType, what: str) -> Encoded:
    n = len(arr)
    if not isinstance(arr, pa.StructArray):
        raise StateTypeError(f"{what}: a {t.serializer} value needs a struct column, got {arr.type}.")
    names = [arr.type.field(i).name for i in range(arr.type.num_fields)]
    if len(names) != len(t.children):
        raise StateTypeError(f"{what}: {t.serializer} has {len(t.children)} fields, the column {len(names)} ({names}).")
    by_name = set(names) == set(t.field_names) and t.kind == "pojo"
    fields = [arr.field(names.index(f)) if by_name else arr.field(i) for i, f in enumerate(t.field_names)]
    if arr.null_count and t.kind != "pojo":
        raise StateTypeError(f"{what}: a null {t.serializer} value; Flink's serializer cannot write nulls there.")
    if t.kind == "tuple":
        if any(f.null_count for f in fields):
            raise StateTypeError(f"{what}: a Flink Tuple field is null; Tuple fields cannot be null.")
        return concat([encode(f, c, what=what) for f, c in zip(fields, t.children)])
    if t.kind == "row":
        extra = 2 if t.row_kind else 0
        nbits = extra + len(fields)
        width = (nbits + 7) // 8
        if not any(f.null_count for f in fields):
            return concat([Encoded.constant(bytes(width), n)] + [encode(f, c, what=what) for f, c in zip(fields, t.children)])
        mask = np.zeros((n, width), np.uint8)
        parts = []
        for j, (f, c) in enumerate(zip(fields, t.children)):
            isnull = f.is_null().to_numpy(zero_copy_only=False)
            b = extra + j
            mask[:, b // 8] |= (isnull.astype(np.uint8) << (7 - b % 8))
            parts.append(_present(f, c, isnull, what))
        return concat([Encoded.fixed(mask)] + parts)
    # POJO: flags (1 = null, 2 = exact class), then per field: null flag + value
    top_null = arr.is_null().to_numpy(zero_copy_only=False) if arr.null_count else np.zeros(n, bool)
    parts = [Encoded.fixed(np.where(top_null, 1, 2).astype(np.uint8).reshape(n, 1))]
    for f, c in zip(fields, t.children):
        isnull = f.is_null().to_numpy(zero_copy_only=False) | top_null
        parts.append(Encoded.fixed(isnull.astype(np.uint8).reshape(n, 1)) if not top_null.any() else
                     Encoded.fixed(np.where(top_null, 0, isnull).astype(np.uint8).reshape(n, 1)))
        parts[-1] = _drop_where(parts[-1], top_null)
        parts.append(_present(f, c, isnull, what))
    return concat(parts)


def _drop_where(e: Encoded, drop: np.ndarray) -> Encoded:
    if not drop.any():
        return e
    lengths = np.where(drop, 0, e.lengths)
    keep = np.flatnonzero(~drop)
    return Encoded(e.take(keep).data, _offsets(lengths))


def _present(f: pa.Array, t: FlinkType, isnull: np.ndarray, what: str) -> Encoded:
    """Encodings of the non-null values of `f`, empty where null."""
    if not isnull.any():
        return encode(f, t, what=what)
    ok = np.flatnonzero(~isnull)
    enc = encode(f.take(pa.array(ok)), t, what=what)
    lengths = np.zeros(len(f), np.int64)
    lengths[ok] = enc.lengths
    return Encoded(enc.data, _offsets(lengths))
