"""Byte encodings for RocksDB: ordered, prefix-free keys and compact, pickle-free value codecs."""

from __future__ import annotations

import datetime as _dt
import decimal
import pickle
import struct
from typing import Any, Callable, Mapping

import pyarrow as pa

from statekit import serde
from statekit.errors import StateTypeError

__all__ = ["KEY_GROUP_PREFIX", "ValueCodec", "decode_namespace", "encode_namespace", "key_codec", "successor"]

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
        out: list[Any] = []
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
    """Decode a namespace at pos (None or a window's start and end); returns it and the next position."""
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
            self.encode: Callable[[Any], bytes] = s.pack
            self.decode: Callable[[bytes], Any] = lambda b: unpack(b)[0]
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
