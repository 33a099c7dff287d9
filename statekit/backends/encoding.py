"""Byte encodings for RocksDB (ordered keys, compact values) and the keyed-table ↔ Python dict conversion."""

from __future__ import annotations

import datetime as _dt
import decimal
import pickle
import struct
from typing import Any, Callable, Iterable, Mapping, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from statekit import serde
from statekit.errors import StateTypeError
from statekit.keygroups import KeyGroupRange, assign_key_groups
from statekit.state.descriptors import StateInfo
from statekit.types import to_arrow_array, to_ddl

#: Arrow type of the namespace column of window operators.
NAMESPACE_TYPE = pa.struct([pa.field("start", pa.int64()), pa.field("end", pa.int64())])

Reader = Callable[[bytes, int], "tuple[Any, int]"]
Writer = Callable[[Any, bytearray], None]

# ------------------------------------------------------------------------------------------------
# Ordered key encodings: byte order equals value order, and no encoding is a prefix of another, so
# key group + key + namespace + map key concatenate into RocksDB keys that sort and scan correctly.
# ------------------------------------------------------------------------------------------------

#: Big-endian 2-byte key-group prefixes, precomputed because every RocksDB key starts with one.
KEY_GROUP_PREFIX = [kg.to_bytes(2, "big") for kg in range(32768)]

_TERMINATOR = b"\x00\x01"  # ends an escaped byte string; sorts before any escaped continuation


def _escape(raw: bytes) -> bytes:
    return (raw.replace(b"\x00", b"\x00\xff") if b"\x00" in raw else raw) + _TERMINATOR


def _unescape(buf: bytes, pos: int) -> tuple[bytes, int]:
    out, start = [], pos
    while True:
        j = buf.index(b"\x00", start)
        out.append(buf[start:j])
        if buf[j + 1] == 0x01:
            return b"".join(out) if len(out) > 1 else out[0], j + 2
        out.append(b"\x00")  # an escaped zero byte (\x00\xff)
        start = j + 2


def _ordered_int(nbytes: int) -> tuple[Callable[[Any], bytes], Reader]:
    bias = 1 << (nbytes * 8 - 1)  # flipping the sign bit makes two's complement sort as unsigned

    def enc(v: Any) -> bytes:
        try:
            return (v + bias).to_bytes(nbytes, "big")
        except (OverflowError, TypeError):
            raise StateTypeError(f"key {v!r} does not fit a {nbytes * 8}-bit signed integer key type.") from None

    def dec(buf: bytes, pos: int) -> tuple[int, int]:
        return int.from_bytes(buf[pos : pos + nbytes], "big") - bias, pos + nbytes

    return enc, dec


def _ordered_float(fmt: str) -> tuple[Callable[[Any], bytes], Reader]:
    n = struct.calcsize(fmt)
    top, full = 1 << (n * 8 - 1), (1 << (n * 8)) - 1

    def enc(v: Any) -> bytes:
        if v != v:
            v = float("nan")  # one canonical NaN, as Java's doubleToLongBits
        u = int.from_bytes(struct.pack(fmt, v), "big")
        return (u ^ full if u & top else u | top).to_bytes(n, "big")

    def dec(buf: bytes, pos: int) -> tuple[float, int]:
        u = int.from_bytes(buf[pos : pos + n], "big")
        u = u ^ top if u & top else u ^ full
        return struct.unpack(fmt, u.to_bytes(n, "big"))[0], pos + n

    return enc, dec


def key_codec(t: pa.DataType) -> tuple[Callable[[Any], bytes], Reader]:
    """Ordered, prefix-free ``(encode(value) -> bytes, decode(buf, pos) -> (value, pos))`` for key type `t`.

    >>> enc, dec = key_codec(pa.int64())
    >>> enc(-1) < enc(0) < enc(1), dec(enc(-5), 0)
    (True, (-5, 8))
    >>> enc, dec = key_codec(pa.string())
    >>> enc("a") < enc("a\\x00") < enc("ab"), dec(enc("x\\x00y"), 0)[0]
    (True, 'x\\x00y')
    """
    for bits, check in ((1, pa.types.is_int8), (2, pa.types.is_int16), (4, pa.types.is_int32), (8, pa.types.is_int64)):
        if check(t):
            return _ordered_int(bits)
    if pa.types.is_date32(t):
        enc32, dec32 = _ordered_int(4)
        epoch = _dt.date(1970, 1, 1).toordinal()
        return (lambda v: enc32(v.toordinal() - epoch)), (
            lambda b, p: (lambda r: (_dt.date.fromordinal(r[0] + epoch), r[1]))(dec32(b, p))
        )
    if pa.types.is_float64(t):
        return _ordered_float(">d")
    if pa.types.is_float32(t):
        return _ordered_float(">f")
    if pa.types.is_boolean(t):
        return (lambda v: b"\x01" if v else b"\x00"), (lambda b, p: (b[p] == 1, p + 1))
    if pa.types.is_string(t):

        def enc_str(v: Any) -> bytes:
            if not isinstance(v, str):
                raise StateTypeError(f"key {v!r} is not a string, but the key type is string.")
            return _escape(v.encode("utf-8", "surrogatepass"))

        def dec_str(buf: bytes, pos: int) -> tuple[str, int]:
            j = buf.index(b"\x00", pos)
            if buf[j + 1] == 0x01:  # the common case: no escaped NUL inside
                return buf[pos:j].decode("utf-8", "surrogatepass"), j + 2
            raw, pos = _unescape(buf, pos)
            return raw.decode("utf-8", "surrogatepass"), pos

        return enc_str, dec_str
    if pa.types.is_binary(t):
        return (lambda v: _escape(bytes(v))), _unescape
    if pa.types.is_struct(t):
        return _ordered_struct(t)
    raise StateTypeError(f"type {t} cannot be a RocksDB key; use integers, strings, floats, booleans or structs.")


def _ordered_struct(t: pa.StructType) -> tuple[Callable[[Any], bytes], Reader]:
    names = [f.name for f in t]
    codecs = [key_codec(f.type) for f in t]

    def enc(v: Any) -> bytes:
        fields = [v[n] for n in names] if isinstance(v, dict) else v
        if len(fields) != len(names):
            raise StateTypeError(f"key {v!r} does not have the {len(names)} fields {names} of the key type.")
        # a null field sorts first: 0x00 marks null, 0x01 a present value
        return b"".join(b"\x00" if f is None else b"\x01" + c[0](f) for f, c in zip(fields, codecs))

    def dec(buf: bytes, pos: int) -> tuple[tuple, int]:
        out = []
        for _, d in codecs:
            if buf[pos] == 0:
                out.append(None)
                pos += 1
            else:
                value, pos = d(buf, pos + 1)
                out.append(value)
        return tuple(out), pos

    return enc, dec


_NS_VOID = b"\x00"
_NS = struct.Struct(">QQ")
_BIAS64 = 1 << 63


def encode_namespace(ns: Any) -> bytes:
    """Ordered bytes of a namespace: one tag byte, then biased big-endian start and end for windows."""
    if ns is None:
        return _NS_VOID
    return b"\x01" + _NS.pack(ns[0] + _BIAS64, ns[1] + _BIAS64)


def decode_namespace(buf: bytes, pos: int) -> tuple[Any, int]:
    if buf[pos] == 0:
        return None, pos + 1
    start, end = _NS.unpack_from(buf, pos + 1)
    return (start - _BIAS64, end - _BIAS64), pos + 17


def successor(prefix: bytes) -> bytes:
    """The smallest byte string greater than every string starting with `prefix` (for range scans)."""
    stripped = prefix.rstrip(b"\xff")
    if not stripped:
        return b"\xff" * (len(prefix) + 1)
    return stripped[:-1] + bytes([stripped[-1] + 1])


# ------------------------------------------------------------------------------------------------
# Value codecs: compact, pickle-free encodings of a declared Arrow type (Arrow IPC per value would
# cost tens of microseconds). Nested values carry a null flag; top-level values are never None.
# ------------------------------------------------------------------------------------------------

_U32 = struct.Struct("<I")
_I64 = struct.Struct("<q")
_FIXED = {
    pa.int8(): "<b", pa.int16(): "<h", pa.int32(): "<i", pa.int64(): "<q",
    pa.float32(): "<f", pa.float64(): "<d", pa.bool_(): "<?",
}  # fmt: skip


def _fixed(fmt: str) -> tuple[Writer, Reader]:
    s = struct.Struct(fmt)
    pack, unpack, n = s.pack, s.unpack_from, s.size

    def w(v: Any, out: bytearray) -> None:
        out += pack(v)

    def r(buf: bytes, pos: int) -> tuple[Any, int]:
        return unpack(buf, pos)[0], pos + n

    return w, r


def _blob(to_bytes: Callable[[Any], bytes], from_bytes: Callable[[bytes], Any]) -> tuple[Writer, Reader]:
    def w(v: Any, out: bytearray) -> None:
        b = to_bytes(v)
        out += _U32.pack(len(b))
        out += b

    def r(buf: bytes, pos: int) -> tuple[Any, int]:
        n = _U32.unpack_from(buf, pos)[0]
        pos += 4
        return from_bytes(buf[pos : pos + n]), pos + n

    return w, r


def _nullable(w: Writer, r: Reader) -> tuple[Writer, Reader]:
    def wn(v: Any, out: bytearray) -> None:
        if v is None:
            out.append(0)
        else:
            out.append(1)
            w(v, out)

    def rn(buf: bytes, pos: int) -> tuple[Any, int]:
        if buf[pos] == 0:
            return None, pos + 1
        return r(buf, pos + 1)

    return wn, rn


_EPOCH_DATE = _dt.date(1970, 1, 1)
_EPOCH_NAIVE = _dt.datetime(1970, 1, 1)
_EPOCH_UTC = _dt.datetime(1970, 1, 1, tzinfo=_dt.timezone.utc)


def _codec(t: pa.DataType, pickled: bool = False) -> tuple[Writer, Reader]:
    """Writer/reader pair for values of Arrow type `t` (pickled: `t` is binary holding pickles)."""
    if pickled:
        return _blob(serde.dumps, pickle.loads)
    if t in _FIXED:
        return _fixed(_FIXED[t])
    if pa.types.is_string(t):
        return _blob(lambda v: v.encode("utf-8", "surrogatepass"), lambda b: b.decode("utf-8", "surrogatepass"))
    if pa.types.is_binary(t):
        return _blob(bytes, bytes)
    if pa.types.is_list(t):
        return _list_codec(_nullable(*_codec(t.value_type)))
    if pa.types.is_map(t):
        return _map_codec(_codec(t.key_type, False), _nullable(*_codec(t.item_type)), hashable_keys=True, kt=t.key_type)
    if pa.types.is_struct(t):
        return _struct_codec(t)
    if pa.types.is_date32(t):
        wi, ri = _fixed("<i")
        return (lambda v, out: wi((v - _EPOCH_DATE).days, out)), (
            lambda b, p: (lambda x: (_EPOCH_DATE + _dt.timedelta(days=x[0]), x[1]))(ri(b, p))
        )
    if pa.types.is_timestamp(t):
        epoch = _EPOCH_UTC if t.tz else _EPOCH_NAIVE
        wi, ri = _fixed("<q")
        return (lambda v, out: wi((v - epoch) // _dt.timedelta(microseconds=1), out)), (
            lambda b, p: (lambda x: (epoch + _dt.timedelta(microseconds=x[0]), x[1]))(ri(b, p))
        )
    if pa.types.is_decimal(t):
        return _blob(lambda v: str(v).encode(), lambda b: decimal.Decimal(b.decode()))
    raise StateTypeError(f"state values of type {t} are not supported by the RocksDB backend; declare a DDL type.")


def _list_codec(elem: tuple[Writer, Reader]) -> tuple[Writer, Reader]:
    we, re_ = elem

    def w(v: Any, out: bytearray) -> None:
        out += _U32.pack(len(v))
        for x in v:
            we(x, out)

    def r(buf: bytes, pos: int) -> tuple[list, int]:
        n = _U32.unpack_from(buf, pos)[0]
        pos += 4
        items = []
        for _ in range(n):
            x, pos = re_(buf, pos)
            items.append(x)
        return items, pos

    return w, r


def _map_codec(key: tuple[Writer, Reader], val: tuple[Writer, Reader], *, hashable_keys: bool, kt: pa.DataType) -> tuple[Writer, Reader]:
    wk, rk = key
    wv, rv = val
    tuple_keys = hashable_keys and pa.types.is_struct(kt)

    def w(v: Any, out: bytearray) -> None:
        pairs = v.items() if isinstance(v, Mapping) else v
        pairs = list(pairs)
        out += _U32.pack(len(pairs))
        for k, x in pairs:
            wk(k, out)
            wv(x, out)

    def r(buf: bytes, pos: int) -> tuple[dict, int]:
        n = _U32.unpack_from(buf, pos)[0]
        pos += 4
        d = {}
        for _ in range(n):
            k, pos = rk(buf, pos)
            if tuple_keys:
                k = tuple(k.values())
            d[k], pos = rv(buf, pos)
        return d, pos

    return w, r


def _struct_codec(t: pa.StructType) -> tuple[Writer, Reader]:
    names = [f.name for f in t]
    fields = [_nullable(*_codec(f.type)) for f in t]

    def w(v: Any, out: bytearray) -> None:
        values = [v.get(n) for n in names] if isinstance(v, Mapping) else v
        if len(values) != len(names):
            raise StateTypeError(f"value {v!r} does not have the {len(names)} fields {names} of its struct type.")
        for x, (wf, _) in zip(values, fields):
            wf(x, out)

    def r(buf: bytes, pos: int) -> tuple[dict, int]:
        d = {}
        for n, (_, rf) in zip(names, fields):
            d[n], pos = rf(buf, pos)
        return d, pos

    return w, r


class ValueCodec:
    """Encodes one stored item of a state to bytes and back.

    An item is a whole value (value/reducing/aggregating state), a whole list (list state, with
    ``element=True`` and `t` the element type) or one map entry's value (``nullable=True``).
    ``ttl=True`` items are ``(value, last_access_ms)`` pairs. Pickled states pickle each value, or
    with ``raw_pickles=True`` pass the pickled bytes through untouched (readers that must not unpickle).

    >>> c = ValueCodec(pa.struct([("n", pa.int64()), ("tags", pa.list_(pa.string()))]))
    >>> c.decode(c.encode({"n": 1, "tags": ["a", None]}))
    {'n': 1, 'tags': ['a', None]}
    """

    __slots__ = ("encode", "decode")

    def __init__(
        self,
        t: pa.DataType,
        *,
        pickled: bool = False,
        raw_pickles: bool = False,
        ttl: bool = False,
        element: bool = False,
        nullable: bool = False,
    ) -> None:
        w, r = _codec(pa.binary()) if pickled and raw_pickles else _codec(t, pickled)
        if nullable and not ttl:
            w, r = _nullable(w, r)  # the TTL pair carries its own presence flag
        if ttl:
            w, r = _ttl_pair(w, r)
        if element:
            w, r = _list_codec((w, r))
        plain = not (ttl or element or nullable or pickled)
        if plain and t in _FIXED:
            s = struct.Struct(_FIXED[t])  # fast path: one pack/unpack, no bytearray
            unpack = s.unpack
            self.encode = s.pack
            self.decode = lambda b: unpack(b)[0]
            return
        if plain and pa.types.is_string(t):
            self.encode = lambda v: v.encode("utf-8", "surrogatepass")
            self.decode = lambda b: b.decode("utf-8", "surrogatepass")
            return

        def encode(v: Any) -> bytes:
            out = bytearray()
            w(v, out)
            return bytes(out)

        self.encode = encode
        self.decode = lambda b: r(b, 0)[0]


def _ttl_pair(w: Writer, r: Reader) -> tuple[Writer, Reader]:
    """Items ``(value, last_access_ms)``: a presence flag, the timestamp, then the value if present."""

    def wt(item: tuple, out: bytearray) -> None:
        v, ts = item
        out.append(v is not None)
        out += _I64.pack(ts)
        if v is not None:
            w(v, out)

    def rt(buf: bytes, pos: int) -> tuple[tuple, int]:
        present, ts = buf[pos], _I64.unpack_from(buf, pos + 1)[0]
        if not present:
            return (None, ts), pos + 9
        v, pos = r(buf, pos + 9)
        return (v, ts), pos

    return wt, rt


# ------------------------------------------------------------------------------------------------
# Keyed table ↔ Python dicts. Backends hold state as ``{namespace: {key: value}}`` per state; the
# savepoint's keyed table has one row per (key, namespace) and one column per state.
# ------------------------------------------------------------------------------------------------


def python_converter(t: pa.DataType, *, hashable: bool = False) -> Callable[[Any], Any] | None:
    """A function turning ``to_pylist()`` output of type `t` into handle values, or None if identical.

    Arrow gives maps as lists of pairs; handles use dicts. Struct keys (of maps, or the operator's
    key when `hashable`) become tuples so they can be dict keys.

    >>> python_converter(pa.map_(pa.string(), pa.int64()))([("a", 1)])
    {'a': 1}
    """
    if pa.types.is_map(t):
        kf = python_converter(t.key_type, hashable=True)
        vf = python_converter(t.item_type)
        if kf is None and vf is None:
            return lambda v: None if v is None else dict(v)
        kf, vf = kf or (lambda x: x), vf or (lambda x: x)
        return lambda v: None if v is None else {kf(k): vf(x) for k, x in v}
    if pa.types.is_list(t):
        ef = python_converter(t.value_type)
        return None if ef is None else (lambda v: None if v is None else [ef(x) for x in v])
    if pa.types.is_struct(t):
        convs = [(f.name, python_converter(f.type, hashable=hashable)) for f in t]
        if hashable:
            return lambda v: None if v is None else tuple(v[n] if c is None else c(v[n]) for n, c in convs)
        if all(c is None for _, c in convs):
            return None
        return lambda v: None if v is None else {n: v[n] if c is None else c(v[n]) for n, c in convs}
    return None


def _pickler(info: StateInfo) -> Callable[[Any], Any]:
    dumps = serde.dumps
    if info.kind == "list":
        return lambda v: [dumps(x) for x in v]
    if info.kind == "map":
        return lambda v: {k: None if x is None else dumps(x) for k, x in v.items()}
    return dumps


def dicts_to_keyed_table(
    *,
    key_type: pa.DataType,
    max_parallelism: int,
    states: Sequence[tuple[StateInfo, Mapping[Any, Mapping[Any, Any]], Callable[[Any], Any] | None]],
    pickle_values: bool = True,
    namespaced: bool = False,
) -> pa.Table:
    """Build the keyed table from per-state ``{namespace: {key: value}}`` dicts.

    Each state comes with an optional export function applied to its stored values (TTL filtering);
    an export result of None means "not set". Values of pickled states are pickled here unless
    `pickle_values` is False (they are pickled bytes already). Rows are sorted by key group, key and
    namespace; the namespace column appears when `namespaced` (the operator used windows) or some
    namespace is not None.
    """
    has_ns = namespaced or any(ns is not None for _, by_ns, _ in states for ns, d in by_ns.items() if d)
    row_of: dict[Any, int] = {}
    columns: list[tuple[StateInfo, list[int] | None, list[Any]]] = []
    first_keys: list[Any] = []
    for index, (info, by_ns, export) in enumerate(states):
        rows: list[int] = []
        values: list[Any] = []
        first = not row_of
        if index == 0 and not has_ns:
            # fast path: the first state's keys are the first rows, in order, without a dict per row
            d = by_ns.get(None) or {}
            if export is None:
                first_keys, values = list(d), list(d.values())
            else:
                pairs = [(k, e) for k, e in zip(d, map(export, d.values())) if e is not None]
                first_keys, values = [p[0] for p in pairs], [p[1] for p in pairs]
            if len(states) > 1:
                row_of = dict(zip(first_keys, range(len(first_keys))))
            by_ns = {}
        for ns, d in by_ns.items():
            items = d.items() if export is None else ((k, export(v)) for k, v in d.items())
            for k, v in items:
                if v is None:
                    continue
                rk = (k, ns) if has_ns else k
                i = row_of.get(rk)
                if i is None:
                    i = row_of[rk] = len(row_of)
                rows.append(i)
                values.append(v)
        if info.kind == "map":
            values = [_sorted_map(v) for v in values]  # entry order independent of write order
        if info.pickled and pickle_values:
            pick = _pickler(info)
            values = [pick(v) for v in values]
        # the first state's rows are 0..n-1 in order, so its values are already the column
        columns.append((info, None if first else rows, values))
    row_list = list(row_of) if row_of else first_keys
    n = len(row_list)
    keys = [rk[0] for rk in row_list] if has_ns else row_list
    key_arr = to_arrow_array(keys, key_type, what="key")
    kg = assign_key_groups(key_arr, max_parallelism, key_type) if n else np.zeros(0, np.int32)
    names = ["key_group", "key"]
    arrays: list[pa.Array] = [pa.array(kg, pa.int32()), key_arr]
    if has_ns:
        nss = [rk[1] for rk in row_list]
        valid = np.fromiter((ns is not None for ns in nss), bool, n)
        starts = [ns[0] if ns is not None else 0 for ns in nss]
        ends = [ns[1] if ns is not None else 0 for ns in nss]
        mask = pa.array(~valid) if not valid.all() else None
        names.append("namespace")
        arrays.append(
            pa.StructArray.from_arrays(
                [pa.array(starts, pa.int64()), pa.array(ends, pa.int64())], fields=list(NAMESPACE_TYPE), mask=mask
            )
        )
    for info, rows, values in columns:
        if rows is not None and (len(rows) != n or rows != list(range(n))):
            full: list[Any] = [None] * n
            for i, v in zip(rows, values):
                full[i] = v
            values = full
        elif len(values) != n:
            values = values + [None] * (n - len(values))
        names.append(info.name)
        arrays.append(to_arrow_array(values, info.arrow_type, what=f"state {info.name!r} value"))
    table = pa.Table.from_arrays(arrays, names=names)
    if n > 1:
        order = _row_order(arrays[0], key_arr, arrays[2] if has_ns else None)
        if (np.diff(order) != 1).any():
            table = table.take(pa.array(order))
    return table


def _sorted_map(m: dict) -> dict:
    try:
        return dict(sorted(m.items(), key=lambda kv: kv[0]))
    except TypeError:  # keys Python cannot order (struct keys with null fields): keep as written
        return m


def _sort_columns(prefix: str, arr: pa.Array) -> list[tuple[str, pa.Array]]:
    if pa.types.is_struct(arr.type):
        return [c for i, child in enumerate(arr.flatten()) for c in _sort_columns(f"{prefix}.{i}", child)]
    return [(prefix, arr)]


def _row_order(kg: pa.Array, key_arr: pa.Array, ns_arr: pa.Array | None) -> np.ndarray:
    """Row order of the keyed table: key group, key, namespace (void first), as RocksDB orders them.

    Sorting makes tables independent of the order state was written in, so every backend and a
    native checkpoint give equal tables.
    """
    cols = [("kg", kg)] + _sort_columns("key", key_arr)
    if ns_arr is not None:
        cols += [("ns.valid", ns_arr.is_valid())] + _sort_columns("ns", ns_arr)
    names = [f"c{i}" for i in range(len(cols))]
    sort_table = pa.Table.from_arrays([c for _, c in cols], names=names)
    indices = pc.sort_indices(sort_table, sort_keys=[(nm, "ascending", "at_start") for nm in names])
    return indices.to_numpy()


def filter_key_groups(
    table: pa.Table, *, key_type: pa.DataType, max_parallelism: int, key_group_range: KeyGroupRange
) -> tuple[pa.Table, np.ndarray]:
    """The rows of `table` in `key_group_range` and their key groups (computed when the column is absent)."""
    if "key_group" in table.column_names:
        kg = table.column("key_group").to_numpy()
    else:
        kg = assign_key_groups(table.column("key"), max_parallelism, key_type)
    keep = (kg >= key_group_range.start) & (kg <= key_group_range.end)
    if not keep.all():
        table = table.filter(pa.array(keep))
        kg = kg[keep]
    return table, kg


def keyed_table_to_dicts(
    table: pa.Table,
    infos: Sequence[StateInfo],
    *,
    key_type: pa.DataType,
    max_parallelism: int,
    key_group_range: KeyGroupRange,
    trust_pickled: bool,
) -> tuple[dict[str, tuple[StateInfo, dict[Any, dict[Any, Any]]]], np.ndarray | None]:
    """Parse a keyed table into per-state ``{namespace: {key: value}}`` dicts, keeping only `key_group_range`.

    Returns the dicts (for states of `infos` present in the table) and the key groups of the kept
    rows in key order of the table (None when no row was kept).
    """
    table, kg = filter_key_groups(table, key_type=key_type, max_parallelism=max_parallelism, key_group_range=key_group_range)
    out: dict[str, tuple[StateInfo, dict[Any, dict[Any, Any]]]] = {}
    if table.num_rows == 0:
        return {info.name: (info, {}) for info in infos if info.name in table.column_names}, None
    key_col = table.column("key")
    if key_col.type != key_type:
        key_col = _cast(key_col, key_type, "key")
    keys = key_col.to_pylist()
    kconv = python_converter(key_type, hashable=True)
    if kconv is not None:
        keys = [kconv(k) for k in keys]
    nss: list[Any] | None = None
    if "namespace" in table.column_names:
        ns_col = table.column("namespace").combine_chunks()
        if ns_col.null_count < len(ns_col):
            starts = pc.struct_field(ns_col, "start").to_pylist()
            ends = pc.struct_field(ns_col, "end").to_pylist()
            valid = ns_col.is_valid().to_numpy(zero_copy_only=False)
            nss = [(s, e) if ok else None for s, e, ok in zip(starts, ends, valid)]
    for info in infos:
        if info.name not in table.column_names:
            continue
        col = table.column(info.name)
        if col.type != info.arrow_type:
            col = _cast(col, info.arrow_type, f"state {info.name!r}")
        if col.null_count:
            idx = np.flatnonzero(col.is_valid().to_numpy(zero_copy_only=False))
            values = col.take(pa.array(idx)).to_pylist()
        else:
            idx = None
            values = col.to_pylist()
        if info.pickled and values:
            values = _unpickle(info, values, trust_pickled)
        else:
            conv = python_converter(info.arrow_type)
            if conv is not None:
                values = [conv(v) for v in values]
        sel_keys = keys if idx is None else [keys[i] for i in idx]
        if nss is None:
            by_ns: dict[Any, dict[Any, Any]] = {None: dict(zip(sel_keys, values))}
        else:
            by_ns = {}
            sel_ns = nss if idx is None else [nss[i] for i in idx]
            for k, ns, v in zip(sel_keys, sel_ns, values):
                d = by_ns.get(ns)
                if d is None:
                    d = by_ns[ns] = {}
                d[k] = v
        out[info.name] = (info, by_ns)
    return out, kg


def _cast(col: Any, t: pa.DataType, what: str) -> Any:
    try:
        return col.cast(t)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as exc:
        raise StateTypeError(f"{what} column has type {col.type}, which cannot be read as {to_ddl(t)} ({exc}).") from None


def _unpickle(info: StateInfo, values: list[Any], trusted: bool) -> list[Any]:
    where = f"state {info.name!r}"
    serde.loads(None, trusted=trusted, where=where)  # raises UntrustedPickleError unless trusted
    loads = pickle.loads
    if info.kind == "list":
        return [[None if x is None else loads(x) for x in v] for v in values]
    if info.kind == "map":
        kf = python_converter(info.arrow_type.key_type, hashable=True) or (lambda k: k)
        return [{kf(k): None if x is None else loads(x) for k, x in v} for v in values]
    return [loads(v) for v in values]

