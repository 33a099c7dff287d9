"""`Encoded`: n values' Flink serializer bytes as one byte buffer and n+1 offsets, and how encodings are joined row
by row (`concat`, `join_runs`) - what the bulk encoders (`values_out`, `sqlwrite`, `avro_out`) build on."""

from __future__ import annotations

import numpy as np

__all__ = ["SCATTER_CHUNK", "Encoded", "concat", "join_runs", "offsets_of"]

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
        return Encoded(_gather(self.data, self.offsets[:-1][idx], lengths), offsets_of(lengths))


def offsets_of(lengths: np.ndarray) -> np.ndarray:
    """The n+1 offsets of n values of `lengths` bytes laid end to end (0, then the running sums)."""
    out = np.zeros(len(lengths) + 1, np.int64)
    np.cumsum(lengths, out=out[1:])
    return out


def _gather(data: np.ndarray, starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Ranges [starts[i], starts[i]+lengths[i]) of `data` concatenated."""
    total = int(lengths.sum())
    out = np.empty(total, np.uint8)
    dst = offsets_of(lengths)
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
            within = np.arange(m, dtype=np.int64) - np.repeat(offsets_of(ln)[:-1], ln)
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
    offsets = offsets_of(lengths)
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
    firsts = offsets_of(counts)
    if sep is not None and n_el:
        last = np.zeros(n_el, bool)
        ends = firsts[1:][counts > 0] - 1
        last[ends] = True
        seps = np.where(last, 0, len(sep)).astype(np.int64)
        sep_enc = Encoded(np.frombuffer(sep * n_el, np.uint8), offsets_of(seps))
        elements = concat([elements, sep_enc])
    lengths = np.add.reduceat(elements.lengths, firsts[:-1]) if n_el else np.zeros(len(counts), np.int64)
    lengths = np.where(counts > 0, lengths, 0)
    body = Encoded(elements.data, offsets_of(lengths))
    if prefix_count:
        return concat([Encoded.fixed(counts.astype(">i4").view(np.uint8).reshape(-1, 4)), body])
    return body


# -- per type ------------------------------------------------------------------------------------------
