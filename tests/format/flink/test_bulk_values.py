"""Bulk byte-range and string decoding (`values.binary_array`, `strings`, `ranges_equal`) against per-value Python."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from statekit.format.arrow_memory import from_numpy, to_numpy
from statekit.format.flink.gather import binary_array, gather_ranges, ranges_equal
from statekit.format.flink.values import _varint, strings


@pytest.mark.parametrize("size", [0, 5, 16, 40, 1000, 100_000])
def test_binary_array_equals_slices(size: int) -> None:
    rng = np.random.default_rng(size)
    buf = rng.integers(0, 256, size).astype(np.uint8)
    starts = rng.integers(0, max(size, 1), 300) if size else np.zeros(0, np.int64)
    lengths = np.minimum(rng.integers(0, 40, len(starts)), size - starts)
    want = [buf[s : s + n].tobytes() for s, n in zip(starts.tolist(), lengths.tolist())]
    assert binary_array(buf, starts, lengths).to_pylist() == want
    assert gather_ranges(buf, starts, lengths).tobytes() == b"".join(want)


def test_binary_array_refuses_ranges_past_the_end() -> None:
    with pytest.raises(IndexError):
        binary_array(np.zeros(10, np.uint8), np.array([8]), np.array([3]))


@pytest.mark.parametrize("size", [5, 16, 40, 1000, 100_000])
def test_ranges_equal_equals_slices(size: int) -> None:
    rng = np.random.default_rng(size)
    buf = rng.integers(0, 3, size).astype(np.uint8)  # few byte values: many equal ranges
    for short in (False, True):
        for _ in range(40):
            a, b = rng.integers(0, size, 30), rng.integers(0, size, 30)
            n = np.minimum(np.minimum(rng.integers(0, 3 if short else 40, 30), size - a), size - b)
            want = all(buf[x : x + k].tobytes() == buf[y : y + k].tobytes() for x, y, k in zip(a, b, n))
            assert ranges_equal(buf, a, b, n) == want
            assert ranges_equal(buf, a, a, n)


def _flink_string(s: str) -> bytes:
    units = s.encode("utf-16-be", "surrogatepass")
    chars = [int.from_bytes(units[i : i + 2], "big") for i in range(0, len(units), 2)]
    return _varint(len(chars) + 1) + b"".join(_varint(c) for c in chars)


def test_strings_ascii_short_and_long_lengths() -> None:
    values = ["", "a", "key-4242424", "x" * 12, "y" * 13, "z" * 126, "w" * 127, "v" * 5000]
    blob, starts = b"\x00" * 3, []
    for v in values:
        starts.append(len(blob))
        blob += _flink_string(v) + b"\x07"  # a byte after each value: ends are checked
    buf = np.frombuffer(blob, np.uint8)
    arr, ends = strings(buf, np.array(starts))
    assert arr.type == pa.string() and arr.to_pylist() == values
    assert [blob[e] for e in ends.tolist()] == [7] * len(values)


def test_strings_non_ascii_and_null_are_left_to_the_record_decoder() -> None:
    for blob in (_flink_string("über") + _flink_string("a"), b"\x00" + _flink_string("a")):
        buf = np.frombuffer(blob, np.uint8)
        assert strings(buf, np.array([0])) is None


def test_arrow_memory_copies_and_round_trips() -> None:
    src = np.arange(10, dtype=np.int64)
    arr = from_numpy(src)
    src[:] = 0  # the Arrow array owns a copy
    assert arr.to_pylist() == list(range(10))
    assert to_numpy(arr).tolist() == list(range(10))
    flags = np.array([True, False, True] * 5)
    assert from_numpy(flags).to_pylist() == flags.tolist()
    assert to_numpy(from_numpy(flags)).tolist() == flags.tolist()


def test_small_pages_restores_numpy_setting() -> None:
    """The huge-page switch is off inside (also nested, also on error) and back to what it was after."""
    import numpy as np
    import pytest

    from statekit.format.arrow_memory import small_pages

    switch = np._core.multiarray._set_madvise_hugepage
    original = switch(True)
    for before in (True, False):
        switch(before)
        with pytest.raises(RuntimeError), small_pages():
            with small_pages():
                assert switch(False) is False  # reads the setting (and keeps it off)
            assert switch(False) is False
            raise RuntimeError
        assert switch(before) is before
    switch(original)
