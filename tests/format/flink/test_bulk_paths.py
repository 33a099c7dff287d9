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


def _flink_savepoint(tmp_path: Path, keys: list, key_type: str, max_parallelism: int = 128) -> Path:
    """A Flink savepoint written by statekit: two ValueState<bigint> over `keys` (a = i, b = 2i + 1)."""
    src = tmp_path / "sk"
    with SavepointBuilder(src) as b:
        op = b.add_operator("bench", parallelism=2, max_parallelism=max_parallelism, key_type=key_type,
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


@pytest.mark.parametrize("probe_bytes", [None, 80], ids=["default-probes", "3-entry-probes"])
def test_long_keys_take_the_strided_view(tmp_path: Path, monkeypatch, probe_bytes: int | None) -> None:
    from statekit.format.flink import locate as L

    if probe_bytes is not None:  # a run's probe blocks capped at 3 entries of 26 bytes
        monkeypatch.setattr(L, "_PROBE", 2)
        monkeypatch.setattr(L, "_PROBE_BYTES", probe_bytes)
    keys = list(range(N))
    stats = _check(_flink_savepoint(tmp_path, keys, "bigint"), keys)
    assert "a: strided-view" in stats and "key: strided-view" in stats and "rows: direct" in stats, stats


@pytest.mark.parametrize("extra", [[], ["x" * 127, "y" * 300, "", "k" * 13]], ids=["short", "long-and-empty"])
def test_string_keys_take_the_scan_and_bulk_strings(tmp_path: Path, extra: list) -> None:
    keys = [f"key-{i}" for i in range(N)] + extra
    stats = _check(_flink_savepoint(tmp_path, keys, "string"), keys)
    assert " scanned" in stats and "key: bulk" in stats and "a: bulk" in stats and "rows: direct" in stats, stats


def test_keys_of_mostly_one_length_take_strided_runs_with_the_odd_entries_between(tmp_path: Path) -> None:
    """Keys of one length but a few (SQL's ``user-106`` beside ``user-1976134``): the key groups are strided runs,
    each odd entry a run of its own, none scanned; too many odd entries (every length mixed) and they are scanned."""
    keys = [f"key-{i:06d}" for i in range(4 * N)] + ["odd", "x" * 40, "", "y" * 11]
    path = _flink_savepoint(tmp_path / "few", keys, "string")
    stats = _check(path, keys)
    assert " 0 scanned" in stats and " 0 chained" in stats and "rows: direct" in stats, stats
    sp = Savepoint.open(path)
    for i in (0, 7, len(keys) - 4, len(keys) - 3, len(keys) - 2, len(keys) - 1):
        assert sp.get("bench", keys[i]) == {"a": i, "b": 2 * i + 1}, keys[i]
    assert sp.get("bench", "key-") is None and sp.get("bench", "od") is None
    mixed = [f"key-{i}" + "x" * (i % 7) for i in range(N)]
    stats = _check(_flink_savepoint(tmp_path / "mixed", mixed, "string"), mixed)
    assert " 0 strided" in stats and "rows: direct" in stats, stats


def test_entries_of_many_runs_are_each_runs_entries_in_order() -> None:
    import numpy as np

    from statekit.format.flink.locate import Entries, Run

    runs = [Run(0, 1, 2, 5, 20, 9, 7), Run(0, 1, 102, 1, 30, 19, 7), Run(1, 1, 500, 3, 12, 4, 4), Run(1, 2, 600, 1, 8, 2, 2)]
    got, want = Entries.of_runs(runs), Entries.concat([r.entries() for r in runs])
    for f in ("chain", "sid", "kp", "klen", "vp", "vlen"):
        assert np.array_equal(getattr(got, f), getattr(want, f)), f
    assert got.kp.tolist() == [6, 26, 46, 66, 86, 106, 504, 516, 528, 604]


def test_non_ascii_string_keys_fall_back_to_records(tmp_path: Path) -> None:
    keys = [f"key-{i}" for i in range(200)] + ["über", "日本"]
    stats = _check(_flink_savepoint(tmp_path, keys, "string"), keys)
    assert "key: per-record" in stats and "rows: direct" in stats, stats


@pytest.mark.parametrize("key_type", ["bigint", "string"])
def test_a_whole_process_read_does_not_import_pandas(tmp_path: Path, key_type: str) -> None:
    """Nor pyarrow.compute, whose import costs a fresh process ~0.2 s (a table read from strided runs needs no cast)."""
    keys = list(range(N)) if key_type == "bigint" else [f"key-{i:05d}" for i in range(N)]
    path = _flink_savepoint(tmp_path, keys, key_type)
    code = (f"import sys; from statekit.savepoint import Savepoint; sp = Savepoint.open({str(path)!r}); "
            f"assert sp.get('bench', {keys[7]!r}); assert 'pyarrow.compute' not in sys.modules, 'compute imported by get'; "
            "t = sp.keyed_table('bench'); assert t.num_rows == 3000; "
            "assert 'pandas' not in sys.modules, 'pandas was imported'; "
            "assert 'pyarrow.compute' not in sys.modules, 'compute imported by keyed_table'")
    subprocess.run([sys.executable, "-c", code], check=True)


def _scan_every_irregular_chain(monkeypatch) -> None:
    """Key groups with any run shorter than `_MIN_RUN` go to the scan (keys sorted by their bytes, as Flink writes
    them, group by length: these tests' key groups would mostly be strided runs)."""
    from statekit.format.flink import locate as L

    monkeypatch.setattr(L, "_IRREGULAR_FREE", 0)
    monkeypatch.setattr(L, "_IRREGULAR_EVERY", 1 << 62)


def _joined(scanned):
    """`_scan_value_lengths`'s state runs as one `Entries` with the run bounds (`_scan_region`'s shape)."""
    from statekit.format.flink.locate import Entries

    if scanned is None:
        return None
    runs, _ = scanned
    bounds = [0]
    for _, e in runs:
        bounds.append(bounds[-1] + len(e))
    return Entries.concat([e for _, e in runs]), bounds


@pytest.mark.parametrize("chunk", [None, 64, 200], ids=["default-steps", "64-byte-steps", "200-byte-steps"])
def test_value_length_scan_finds_what_the_key_group_scan_finds(tmp_path: Path, monkeypatch, chunk) -> None:
    """Values all 8 bytes: the scan for ``00 00 00 08`` meets false candidates (values holding those bytes,
    5-char keys whose key length is 8, key group 8 whose prefix byte is 8) and still finds exactly the
    entries the key-group scan finds, or leaves the key group to it. Small proof steps put false
    candidates and state-run ends at every step boundary; a proof stopped early (`until`) returns the
    same chain up to where it stopped."""
    import numpy as np

    from statekit.format.flink import locate as L
    from statekit.format.flink.reader import FlinkStateReader

    if chunk:
        monkeypatch.setattr(L, "_CHUNK", chunk)
    _scan_every_irregular_chain(monkeypatch)

    keys = [f"key-{i}" for i in range(N)] + [f"k{i:04d}" for i in range(N)] + ["\x08" * 9, "a\x00\x00\x00\x08b"]
    vals = [8, 0x0000000800000008, 0x0800000008000000, -8, 0, (1 << 63) - 1]
    a = [vals[i % len(vals)] if i % 3 else i for i in range(len(keys))]
    b = [0x08 << (8 * (i % 5)) for i in range(len(keys))]
    src = tmp_path / "sk"
    with SavepointBuilder(src) as sb:
        op = sb.add_operator("bench", parallelism=2, max_parallelism=128, key_type="string",
                             keyed_states=[ValueStateDescriptor("a", "bigint"), ValueStateDescriptor("b", "bigint")])
        op.write_keyed(pa.table({"key": pa.array(keys, pa.string()), "a": pa.array(a, pa.int64()),
                                 "b": pa.array(b, pa.int64())}))
    path = write_flink(src, tmp_path / "flink")
    sp = Savepoint.open(path)
    got = {r["key"]: (r["a"], r["b"]) for r in sp.keyed_table("bench").to_pylist()}
    assert got == {k: (x, y) for k, x, y in zip(keys, a, b)}
    assert "by value length" in sp.stats.describe(), sp.stats.describe()

    fr = FlinkStateReader(path)
    op_state = fr.metadata.operators[[o.operator_id for o in fr.metadata.operators].index(sp.operator("bench").uid_hash)]
    found = 0
    for h in fr.keyed_handles(op_state):
        buf = fr.files.range_array(h.delegate, 0, fr.files.size(h.delegate))
        nz = sorted(o for o in h.offsets if o)
        for i, o in enumerate(h.offsets):
            if not o:
                continue
            lim = nz[nz.index(o) + 1] if o != nz[-1] else len(buf)
            sid = int(buf[o]) << 8 | int(buf[o + 1])
            by_kg = L._scan_region(buf, o + 2, lim, h.start + i, 1, 0, sid)
            by_len = _joined(L._scan_value_lengths(buf, o + 2, lim, h.start + i, 1, 0, sid, 8))
            assert by_kg is not None
            if by_len is not None:
                found += 1
                assert by_len[1] == by_kg[1]
                for f in ("sid", "kp", "klen", "vp", "vlen"):
                    assert np.array_equal(getattr(by_len[0], f), getattr(by_kg[0], f)), f
                e = by_kg[0]
                for until in (int(e.kp[0]), int(e.kp[len(e) // 3]), int(e.kp[-1]) + 100):
                    part, bounds = _joined(L._scan_value_lengths(buf, o + 2, lim, h.start + i, 1, 0, sid, 8, until))
                    # every entry that starts by `until` (4 bytes before its key); with small steps, few more
                    assert len(part) == len(e) or int(e.kp[len(part)]) - 4 > until
                    if chunk:
                        assert len(part) == len(e) or int(part.kp[-1]) - until < chunk + 300
                    assert bounds[-1] == len(part) and set(bounds) <= set(by_kg[1]) | {len(part)}
                    for f in ("sid", "kp", "klen", "vp", "vlen"):
                        assert np.array_equal(getattr(part, f), getattr(e, f)[: len(part)]), f
            # a wrong value width never proves a chain
            assert L._scan_value_lengths(buf, o + 2, lim, h.start + i, 1, 0, sid, 4) is None
    assert found > 100


@pytest.mark.parametrize("chunk,max_parallelism", [(None, 128), (64, 128), (64, 4096)],
                         ids=["default-steps", "64-byte-steps", "two-byte-key-group-prefix"])
def test_get_matches_whole_keys_only_when_a_key_hides_inside_another(tmp_path: Path, monkeypatch, chunk,
                                                                     max_parallelism) -> None:
    # With 64-byte proof steps a get proves the chain only up to the key's last occurrence.
    if chunk:
        from statekit.format.flink import locate as L

        monkeypatch.setattr(L, "_CHUNK", chunk)
    _scan_every_irregular_chain(monkeypatch)
    # Flink writes "key-7" as 06 'key-7' and the VoidNamespace byte 00: the bytes of that key (and its
    # namespace byte) also occur inside the key "a\x06key-7", at a position where no entry starts.
    hidden = [f"a\x06key-{i}" for i in range(0, N, 3)]
    keys = [f"key-{i}" for i in range(N) if i % 3] + hidden  # "key-0", "key-3", ... exist only inside others
    path = _flink_savepoint(tmp_path, keys, "string", max_parallelism)
    sp = Savepoint.open(path)
    for i, k in enumerate(keys):
        assert sp.get("bench", k) == {"a": i, "b": 2 * i + 1}, k
    for i in range(0, N, 3):
        assert sp.get("bench", f"key-{i}") is None
    assert "lookup" in sp.stats.describe() and "by value length" in sp.stats.describe(), sp.stats.describe()


def test_get_of_long_keys_compares_keys_in_place(tmp_path: Path) -> None:
    keys = list(range(N))
    sp = Savepoint.open(_flink_savepoint(tmp_path, keys, "bigint"))
    for k in (0, 1, N // 2, N - 1):
        assert sp.get("bench", k) == {"a": k, "b": 2 * k + 1}
    assert sp.get("bench", N) is None and sp.get("bench", -1) is None


def _read_without(tmp_path: Path, keys: list, no_a: set[int], no_b: set[int]) -> Savepoint:
    """A savepoint of states a = i and b = 2i + 1 over `keys`, but a not at `no_a` and b not at `no_b`, opened
    after its keyed table was checked to read exactly that."""
    a = [None if i in no_a else i for i in range(len(keys))]
    b = [None if i in no_b else 2 * i + 1 for i in range(len(keys))]
    src = tmp_path / "sk"
    key_type = "bigint" if isinstance(keys[0], int) else "string"
    with SavepointBuilder(src) as sb:
        op = sb.add_operator("bench", parallelism=2, max_parallelism=128, key_type=key_type,
                             keyed_states=[ValueStateDescriptor("a", "bigint"), ValueStateDescriptor("b", "bigint")])
        op.write_keyed(pa.table({"key": pa.array(keys), "a": pa.array(a, pa.int64()), "b": pa.array(b, pa.int64())}))
    sp = Savepoint.open(write_flink(src, tmp_path / "flink"))
    got = {r["key"]: (r["a"], r["b"]) for r in sp.keyed_table("bench").to_pylist()}
    assert got == {k: (x, y) for k, x, y in zip(keys, a, b)}
    return sp


def test_states_with_different_keys_are_joined_not_paired(tmp_path: Path) -> None:
    """In key groups state b misses a key that a holds and holds one of the same length that a misses: state
    runs of equal entry counts and byte sizes, but other keys, so rows are joined by key, never paired by position."""
    from statekit.format.keyed import compute_key_groups

    keys = [f"key-{i}" + "x" * (i % 5) for i in range(N)]  # lengths vary entry to entry: every key group is scanned
    kg = compute_key_groups(pa.array(keys), 128, "string")
    same_group_and_length: dict[tuple[int, int], list[int]] = {}
    for i, g in enumerate(kg.tolist()):
        same_group_and_length.setdefault((g, len(keys[i])), []).append(i)
    no_a = {rows[0] for rows in same_group_and_length.values() if len(rows) > 2}
    no_b = {rows[1] for rows in same_group_and_length.values() if len(rows) > 2}
    assert len(no_a) > 100
    sp = _read_without(tmp_path, keys, no_a, no_b)
    assert "rows: joined" in sp.stats.describe() and " 0 strided" in sp.stats.describe(), sp.stats.describe()


def test_runs_compare_equal_only_when_every_key_byte_is_equal() -> None:
    """Two state runs built by hand: values may differ; a key byte, or a key's length, may not."""
    import struct

    import numpy as np

    from statekit.format.flink.keyed import _same_keys_in_runs
    from statekit.format.flink.locate import Entries, Located

    def run(keys: list[bytes], values: list[int]) -> bytes:
        return b"".join(struct.pack(">i", len(k)) + k + struct.pack(">iq", 8, v) for k, v in zip(keys, values))

    def entries(keys: list[bytes], at: int, sid: int) -> Entries:
        kp, vp = [], []
        for k in keys:
            kp.append(at + 4)
            vp.append(at + 8 + len(k))
            at += 16 + len(k)
        n = len(keys)
        return Entries(np.zeros(n, np.int64), np.full(n, sid, np.int64), np.array(kp), np.array([len(k) for k in keys]),
                       np.array(vp), np.full(n, 8, np.int64))

    keys = [b"\x05\x06key-1\x00", b"\x05\x08key-123\x00", b"\x85\x07key-12\x00"]
    first = run(keys, [1, 2, 3])
    for other_keys, values, same in [
        (keys, [7, 8, 9], True),  # other values, same keys
        ([keys[0], b"\x05\x08key-124\x00", keys[2]], [1, 2, 3], False),  # one key byte differs
        ([keys[0], b"\x05\x07key-12\x00", b"\x85\x08key-123\x00"], [1, 2, 3], False),  # lengths swapped
    ]:
        buf = np.frombuffer(first + b"\xff\xff" + run(other_keys, values), np.uint8)
        a, b = entries(keys, 0, 0), entries(other_keys, len(first) + 2, 1)
        assert _same_keys_in_runs(buf, Located([], Entries.concat([])), a, b) is same, other_keys


@pytest.mark.parametrize("seed", range(40))
def test_follow_keeps_exactly_the_path_from_the_first_candidate(seed: int) -> None:
    """True entries form a chain from candidate 0; false candidates lie inside them and point anywhere
    (forwards, backwards, at each other, nowhere). Few of them take the walk over exceptions, many (300)
    the pointer doubling: both keep exactly the true chain."""
    import numpy as np

    from statekit.format.flink import locate as L

    rng = np.random.default_rng(seed)
    true = np.cumsum(rng.integers(10, 40, 300))
    false = true[:-1] + rng.integers(1, 9, len(true) - 1)
    false = rng.choice(false, int(rng.choice([0, 1, 3, 20, 299])), replace=False)
    c = np.unique(np.concatenate([true, false]))
    nxt = np.empty(len(c), np.int64)
    is_true = np.isin(c, true)
    nxt[is_true] = np.append(true[1:], true[-1] + 25)
    nxt[~is_true] = rng.choice(np.concatenate([c, c + 1, [-1]]), int((~is_true).sum()))
    got = L._follow(c, nxt)
    got = np.arange(len(c)) if got is None else got
    assert np.array_equal(c[got], true)  # the true chain, whatever the false candidates point at


def test_keyed_batches_and_the_conversion_through_them_equal_the_whole_table(tmp_path: Path) -> None:
    """Small batches (many per subtask stream): ascending, disjoint key groups that add up to the whole table;
    the conversion, which writes them while decoding the next, keeps every row."""
    from statekit.savepoint.convert import convert_to_statekit

    keys = [f"key-{i}" for i in range(N)]
    path = _flink_savepoint(tmp_path, keys, "string")
    sp = Savepoint.open(path)
    whole = sp.keyed_table("bench", with_key_group=True)
    batches = list(sp.keyed_batches("bench", batch_bytes=2000))
    assert len(batches) > 10
    groups = [b.column("key_group").to_pylist() for b in batches if b.num_rows]
    assert all(max(a) < min(b) for a, b in zip(groups, groups[1:]))
    assert pa.concat_tables(batches).equals(whole)
    out = Savepoint.open(convert_to_statekit(path, tmp_path / "converted", uids=["bench"]))
    assert out.keyed_table("bench", with_key_group=True).equals(whole)


def _state_run(kg: int, keys: list[bytes], values: list[int], widths: list[int] | None = None) -> bytes:
    """One state's entries of key group `kg` as a canonical savepoint writes them (Long values of 8 bytes, or `widths`;
    the run-end flag in the last key's prefix)."""
    import struct

    out = b""
    for i, (k, v) in enumerate(zip(keys, values)):
        key = bytes([kg | (0x80 if i == len(keys) - 1 else 0)]) + k
        w = 8 if widths is None else widths[i]
        out += struct.pack(">i", len(key)) + key + struct.pack(">i", w) + v.to_bytes(w, "big")
    return out


def _two_states(first: bytes, second: bytes):
    """A key group of two state runs (state ids 0 and 1) as bytes (`data`), the buffer they are read from, and the
    entries a walk finds there."""
    import numpy as np

    from statekit.format.flink import locate as L

    data = b"\x00\x00" + first + b"\x00\x01" + second + b"\xff\xff"
    buf = np.frombuffer(data + b"\x00" * 16, np.uint8)
    return data, buf, L._chained(buf, [(0, 2, 0)], np.array([len(data)]), "test", L.DecodeStats())


@pytest.mark.parametrize("chunk", [None, 64], ids=["default-steps", "64-byte-steps"])
def test_a_state_run_is_taken_as_a_copy_of_the_first_only_when_its_bytes_say_so(monkeypatch, chunk) -> None:
    """A key group's second state run whose bytes equal the first's outside the values is located as a copy
    of it (recorded, so its keys are not compared again); one key byte, one key length, one entry more,
    or a value length that differs each make it proven on its own. Either way the entries are the walk's."""
    import functools

    import numpy as np

    from statekit.format.flink import locate as L

    if chunk:
        monkeypatch.setattr(L, "_CHUNK", chunk)
    kg = 5
    run = functools.partial(_state_run, kg)

    keys = [b"\x08key-%d\x00" % i for i in range(40)] + [b"\x0ckey-1234567\x00"]
    first = run(keys, list(range(41)))
    cases = [
        (run(keys, [8 * i for i in range(41)]), True),  # same keys, other values (some 00 00 00 08)
        (run(keys[:7] + [b"\x08kez-7\x00"] + keys[8:], list(range(41))), False),  # one key byte
        (run(keys[:7] + [b"\x09key-77\x00"] + keys[8:], list(range(41))), False),  # one key length
        (run(keys + [b"\x08key-x\x00"], list(range(42))), False),  # one entry more
        (run(keys, list(range(41)), [8] * 20 + [4] + [8] * 20), False),  # one value length
    ]
    for second, copied in cases:
        data, buf, walked = _two_states(first, second)
        got = L._scan_value_lengths(buf, 2, len(data), kg, 1, 0, 0, 8)
        if got is None:  # a value of another width: left to the key-group scan or the walk
            assert not copied
            continue
        copies = got[1]
        entries, bounds = _joined(got)
        assert copies == ({1: 0} if copied else {})
        assert [s for s, _ in got[0]] == [0, 1]
        assert bounds == [0, 41, len(walked)]
        for f in ("sid", "kp", "klen", "vp", "vlen"):
            assert np.array_equal(getattr(entries, f), getattr(walked, f)), f


@pytest.mark.parametrize("block", [None, 64], ids=["default-blocks", "64-byte-blocks"])
def test_a_strided_state_run_is_a_copy_of_the_first_only_when_its_bytes_say_so(monkeypatch, block) -> None:
    """A key group's second state whose runs equal the first's outside the values is located as their copy (recorded,
    so its keys are not compared again when the columns are cut); one key byte (in any block), one key length, one
    entry more or a value length that differs each make it probed on its own. Either way the entries are the walk's."""
    import functools

    import numpy as np

    from statekit.format.flink import locate as L

    if block:
        monkeypatch.setattr(L, "_COPY_BLOCK_BYTES", block)
    kg = 5
    state = functools.partial(_state_run, kg)

    # two runs a state: 30 keys of 6 bytes, then 20 of 8 (key bytes, VoidNamespace's included)
    keys = [b"\x05k-%02d\x00" % i for i in range(30)] + [b"\x07k-%04d\x00" % i for i in range(20)]
    first = state(keys, list(range(50)))
    cases = [
        (state(keys, [8 * i + 1 for i in range(50)]), True),  # same keys, other values
        (state(keys[:3] + [b"\x05k-x3\x00"] + keys[4:], list(range(50))), False),  # one key byte, first run
        (state(keys[:45] + [b"\x07k-x045\x00"] + keys[46:], list(range(50))), False),  # one key byte, second run
        (state(keys[:7] + [b"\x06k-077\x00"] + keys[8:], list(range(50))), False),  # one key length
        (state(keys + [b"\x07k-9999\x00"], list(range(51))), False),  # one entry more
        (state(keys, list(range(50)), [8] * 40 + [4] + [8] * 9), False),  # one value length
    ]
    for second, copied in cases:
        data, buf, walked = _two_states(first, second)
        stats = L.DecodeStats()
        got = L.locate(buf, np.array([0]), np.array([len(data)]), "test", stats, chain_kg=np.array([kg]))
        assert not len(got.chained) and not got.pieces, got
        assert got.same_keys == ({(0, 1): 0} if copied else {})
        assert (stats.strided_copied == 50) == copied and stats.strided_entries == len(walked)
        entries = L.Entries.concat([L.Entries.of_runs([r]) for r in got.runs])
        for f in ("sid", "kp", "klen", "vp", "vlen"):
            assert np.array_equal(getattr(entries, f), getattr(walked, f)), f


# -- tables cut from strided runs (`strided`): every state's entries in runs of one key and value size ---------------
@pytest.mark.parametrize("max_parallelism", [128, 256], ids=["1-byte-prefix", "2-byte-prefix"])
def test_string_runs_of_several_lengths_are_cut_from_strided_views(tmp_path: Path, max_parallelism: int) -> None:
    """Keys of a few lengths (each key group a few strided runs), strings past 126 chars (a two-byte length header),
    the empty string and a few odd lengths among them: read exactly from 2-D views, no entry located one by one."""
    keys = ([f"key-{i:05d}" for i in range(4 * N)] + [("x" * 130) + f"{i:05d}" for i in range(N)]
            + ["", "odd", "y" * 126, "z" * 127, "w" * 128])
    stats = _check(_flink_savepoint(tmp_path, keys, "string", max_parallelism), keys)
    assert " 0 scanned" in stats and " 0 chained" in stats and "rows: direct" in stats, stats
    assert "key: strided-view" in stats and "a: strided-view" in stats, stats


def test_non_ascii_string_runs_are_decoded_entry_by_entry(tmp_path: Path) -> None:
    """Keys of one length in chars but multi-byte chars (a run's width no longer says its length): exact, not cut."""
    keys = [f"ключ-{i:05d}" for i in range(N)] + [f"é{i:05d}" for i in range(N)]
    stats = _check(_flink_savepoint(tmp_path, keys, "string"), keys)
    assert "key: per-record" in stats and "rows: direct" in stats, stats


def test_string_values_in_runs_are_cut_from_strided_views(tmp_path: Path) -> None:
    """ValueState<String> values of one length, with a few of other lengths between them (runs of their own).
    (The state alone: another state's runs would be cut elsewhere, and states whose runs do not pair up are read
    entry by entry.)"""
    keys = list(range(4 * N))
    vals = [f"v{i:06d}" if i % 500 else ("" if i % 1000 else "long" * 40) for i in keys]
    src = tmp_path / "sk"
    with SavepointBuilder(src) as b:
        op = b.add_operator("bench", parallelism=2, max_parallelism=128, key_type="bigint",
                            keyed_states=[ValueStateDescriptor("s", "string")])
        op.write_keyed(pa.table({"key": pa.array(keys, pa.int64()), "s": pa.array(vals)}))
    sp = Savepoint.open(write_flink(src, tmp_path / "flink"))
    got = {r["key"]: r["s"] for r in sp.keyed_table("bench").to_pylist()}
    assert got == dict(zip(keys, vals))
    stats = sp.stats.describe()
    assert "s: strided-view" in stats and "key: strided-view" in stats and "rows: direct" in stats, stats


def test_runs_of_equal_sizes_but_other_keys_are_joined_not_paired(tmp_path: Path) -> None:
    """Keys of one length; in every key group state a misses one key and b another: the states' runs pair up in
    count and size, but not in key bytes, so rows are joined by key, never paired by position."""
    from statekit.format.keyed import compute_key_groups

    keys = [f"key-{i:05d}" for i in range(N)]
    groups: dict[int, list[int]] = {}
    for i, g in enumerate(compute_key_groups(pa.array(keys), 128, "string").tolist()):
        groups.setdefault(g, []).append(i)
    no_a = {rows[0] for rows in groups.values() if len(rows) > 2}
    no_b = {rows[-1] for rows in groups.values() if len(rows) > 2}
    assert len(no_a) > 100
    sp = _read_without(tmp_path, keys, no_a, no_b)
    assert "rows: joined" in sp.stats.describe() and " 0 scanned" in sp.stats.describe(), sp.stats.describe()


def test_long_key_runs_of_equal_counts_but_other_keys_are_joined_not_paired(tmp_path: Path, monkeypatch) -> None:
    """Long keys; in every key group state a misses one key and b another: the runs pair up in count and size, and
    the keys cut from a's runs differ from b's (in a later block of the walk too), so rows are joined by key."""
    from statekit.format.flink import strided
    from statekit.format.keyed import compute_key_groups

    monkeypatch.setattr(strided, "_BLOCK", 5)
    keys = list(range(N))
    groups: dict[int, list[int]] = {}
    for i, g in enumerate(compute_key_groups(pa.array(keys, pa.int64()), 128, "bigint").tolist()):
        groups.setdefault(g, []).append(i)
    no_a = {rows[len(rows) // 2] for rows in groups.values() if len(rows) > 2}
    no_b = {rows[-1] for rows in groups.values() if len(rows) > 2}
    assert len(no_a) > 100
    sp = _read_without(tmp_path, keys, no_a, no_b)
    assert "rows: joined" in sp.stats.describe() and " 0 scanned" in sp.stats.describe(), sp.stats.describe()


def _two_runs(width: int, count: int, stride: int):
    """Two runs of `count` entries built by hand (other bytes random), whose keys (`width` bytes at 4) are equal: the
    buffer, each run's entries as rows, and the two `Run`s."""
    import numpy as np

    from statekit.format.flink.locate import Run

    rng = np.random.default_rng(width)
    a = rng.integers(0, 256, count * stride, dtype=np.uint8).reshape(count, stride)
    b = rng.integers(0, 256, count * stride, dtype=np.uint8).reshape(count, stride)
    b[:, 4 : 4 + width] = a[:, 4 : 4 + width]
    buf = np.concatenate([a.ravel(), b.ravel()])
    return buf, a, b, Run(0, 1, 0, count, stride, width, 8), Run(0, 2, count * stride, count, stride, width, 8)


@pytest.mark.parametrize("dtype", [">i8", ">f8", ">i4", "i1"])
def test_fixed_columns_compare_every_key_byte(dtype: str, monkeypatch) -> None:
    """Two runs built by hand (stride 29, other values), cut in blocks of 7 entries: the columns are the fields, and
    a single key byte of the second run changed anywhere refuses them; float keys are compared as bytes (0.0 is not
    -0.0, a NaN equals itself)."""
    import numpy as np

    from statekit.format.arrow_memory import to_numpy
    from statekit.format.flink import strided

    monkeypatch.setattr(strided, "_BLOCK", 7)
    w = np.dtype(dtype).itemsize
    count, stride = 40, 29
    buf, a, b, ra, rb = _two_runs(w, count, stride)

    def cut(data: np.ndarray):
        return strided.fixed_columns(data, [([ra], [4], dtype), ([ra], [12 + w], ">i8"), ([rb], [12 + w], ">i8")], [[rb]])

    got = cut(buf)
    assert got is not None
    for col, (run, at, dt) in zip(got, [(a, 4, dtype), (a, 12 + w, ">i8"), (b, 12 + w, ">i8")]):
        want = np.ascontiguousarray(run[:, at : at + np.dtype(dt).itemsize]).view(dt).ravel()
        assert np.array_equal(to_numpy(col).view(f"u{want.itemsize}"), want.astype(want.dtype.newbyteorder("=")).view(f"u{want.itemsize}"))
    for j in range(w):
        for row in (0, 6, 7, count // 2, count - 1):
            other = buf.copy()
            other[count * stride + row * stride + 4 + j] ^= 0x40
            assert cut(other) is None, (j, row)
    if dtype == ">f8":
        for x, y, same in [(0.0, -0.0, False), (float("nan"), float("nan"), True)]:
            other = buf.copy()
            other[10 * stride + 4 : 10 * stride + 12] = np.frombuffer(np.array([x], ">f8").tobytes(), np.uint8)
            other[(count + 10) * stride + 4 : (count + 10) * stride + 12] = np.frombuffer(np.array([y], ">f8").tobytes(), np.uint8)
            assert (cut(other) is not None) == same, (x, y)


@pytest.mark.parametrize("length", [3, 8, 12, 17])
def test_same_bytes_of_runs_sees_every_byte(length: int) -> None:
    """Two runs built by hand (stride 29, other values): equal, then unequal in each single key byte in turn."""

    from statekit.format.flink.strided import same_bytes

    count, stride = 40, 29
    buf, _, _, ra, rb = _two_runs(length, count, stride)
    assert same_bytes(buf, ra, rb, 4, length)
    for j in range(length):
        for row in (0, count // 2, count - 1):
            other = buf.copy()
            other[count * stride + row * stride + 4 + j] ^= 0x40
            assert not same_bytes(other, ra, rb, 4, length), (j, row)


@pytest.mark.parametrize("probe_bytes", [None, 80], ids=["default-probes", "3-entry-probes"])
@pytest.mark.parametrize("max_parallelism", [128, 256], ids=["1-byte-prefix", "2-byte-prefix"])
@pytest.mark.parametrize("where", ["first", "middle", "last"])
def test_an_entry_under_another_key_groups_prefix_is_reported(tmp_path: Path, monkeypatch, max_parallelism: int,
                                                              where: str, probe_bytes: int | None) -> None:
    """One entry of a strided run (Long keys) carries another key group in its prefix: a typed error, not a row."""
    from statekit.errors import CorruptSavepointError
    from statekit.format.flink import locate as L

    if probe_bytes is not None:  # a run's probe blocks capped at 3 entries: the entry lies in a later one
        monkeypatch.setattr(L, "_PROBE", 2)
        monkeypatch.setattr(L, "_PROBE_BYTES", probe_bytes)

    path = _flink_savepoint(tmp_path, list(range(N)), "bigint", max_parallelism)
    sp = Savepoint.open(path)
    h = sp.flink.keyed_handles(sp.flink_operator("bench"))[0]
    kg, start, end = sp.flink.key_group_spans(h)[0]
    P = 1 if max_parallelism <= 128 else 2
    stride = 4 + (P + 8 + 1) + 4 + 8
    n = (end - start - 6) // (2 * stride)  # state a's entries (b holds the same keys)
    assert n > 4
    j = {"first": 0, "middle": n // 2, "last": n - 1}[where]
    f = path / h.delegate.path
    data = bytearray(f.read_bytes())
    at = start + 2 + j * stride + 4
    other = (kg + 1) % max_parallelism
    if P == 1:
        data[at] = data[at] & 0x80 | other
    else:
        data[at], data[at + 1] = data[at] & 0x80 | other >> 8, other & 0xFF
    f.write_bytes(bytes(data))
    with pytest.raises(CorruptSavepointError, match="key-group prefix differs"):
        Savepoint.open(path).keyed_table("bench")


def test_runs_and_the_entry_path_agree_on_a_damaged_namespace_byte(tmp_path: Path, monkeypatch) -> None:
    """String keys in runs; one entry's VoidNamespace byte (0 as written) set to 1 in state b: the key bytes the entry
    path compares include that byte, so the strided-run table must not pair the states either - both read the same."""
    import re

    from statekit.format.flink import keyed

    keys = [f"key-{i:05d}" for i in range(N)]
    path = _flink_savepoint(tmp_path, keys, "string")
    damaged = 0
    for f in sorted(p for p in path.iterdir() if p.name != "_metadata"):
        data = bytearray(f.read_bytes())
        hits = [m.start() for m in re.finditer(rb"\x00\x00\x00\x0c[\x00-\xff]\x0akey-", bytes(data))]
        if hits:
            at = hits[len(hits) // 2 + 3]  # past the middle: an entry of state b
            assert data[at + 15] == 0
            data[at + 15] = 1
            f.write_bytes(bytes(data))
            damaged += 1
    assert damaged
    runs = Savepoint.open(path).keyed_table("bench", with_key_group=True)
    monkeypatch.setattr(keyed, "_MIN_MEAN_RUN", 1 << 40)  # every table from the located entries
    entries = Savepoint.open(path).keyed_table("bench", with_key_group=True)
    assert runs.equals(entries)
    assert runs.num_rows > N  # the damaged keys are not paired with state a's


@pytest.mark.parametrize("entry", [0, 5], ids=["a-runs-first-entry", "inside-a-run"])
def test_runs_and_the_entry_path_agree_on_a_damaged_string_header(tmp_path: Path, monkeypatch, entry: int) -> None:
    """String keys in runs, whose headers `locate` checks with the key-group prefix; one key's header (10 as written:
    9 chars) set to 9 in both states (so their keys still compare equal): the run ends before it, and the read fails
    as the entry path's does, instead of returning a key its header does not describe."""
    import re

    from statekit.format.flink import keyed

    keys = [f"key-{i:05d}" for i in range(N)]
    path = _flink_savepoint(tmp_path, keys, "string")
    clean = Savepoint.open(path)
    clean.keyed_table("bench")
    assert "(3000 as copies" in clean.stats.describe(), clean.stats.describe()
    f = sorted(p for p in path.iterdir() if p.name != "_metadata")[0]
    data = bytearray(f.read_bytes())
    hits = [m.start() for m in re.finditer(rb"\x00\x00\x00\x0c[\x00-\xff]\x0akey-", bytes(data))]
    key = bytes(data[hits[entry] : hits[entry] + 16])  # length, prefix, header, chars, VoidNamespace's byte
    both = [m.start() for m in re.finditer(re.escape(key), bytes(data))]
    assert len(both) == 2  # the key in state a and in state b
    for at in both:
        data[at + 5] = 9
    f.write_bytes(bytes(data))

    def read() -> pa.Table | type:
        try:
            return Savepoint.open(path).keyed_table("bench", with_key_group=True)
        except Exception as e:  # noqa: BLE001 - the same failure either way
            return type(e)

    runs = read()
    monkeypatch.setattr(keyed, "_MIN_MEAN_RUN", 1 << 40)  # every table from the located entries
    assert runs == read()


def test_a_chain_left_to_the_walk_after_a_copied_state_keeps_no_copy_record() -> None:
    """State b copies a's run, then state c's entries change size at every entry (too many odd runs): the whole key
    group goes to the walk, b's copy is forgotten with its runs, and the entries are the walk's."""
    import numpy as np

    from statekit.format.flink import locate as L

    kg = 5
    keys = [b"\x05k-%02d\x00" % i for i in range(40)]
    odd = [b"\x03" + b"x" * (i + 1) + b"\x00" for i in range(20)]  # 20 key sizes: a run of one entry each
    data = (b"\x00\x00" + _state_run(kg, keys, list(range(40))) + b"\x00\x01" + _state_run(kg, keys, list(range(40)))
            + b"\x00\x02" + _state_run(kg, odd, list(range(20))) + b"\xff\xff")
    buf = np.frombuffer(data + b"\x00" * 16, np.uint8)
    walked = L._chained(buf, [(0, 2, 0)], np.array([len(data)]), "test", L.DecodeStats())
    stats = L.DecodeStats()
    got = L.locate(buf, np.array([0]), np.array([len(data)]), "test", stats)
    assert not got.runs and got.same_keys == {} and stats.strided_entries == stats.strided_copied == 0
    for f in ("sid", "kp", "klen", "vp", "vlen"):
        assert np.array_equal(getattr(got.chained, f), getattr(walked, f)), f
