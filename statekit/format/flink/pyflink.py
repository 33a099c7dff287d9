"""PyFlink keyed state (process mode): the one-field Row key unwrapped and each Python state's coder bytes decoded by declared type.

Boundary: input is a keyed/timers table as `keyed.decode` builds it for an operator of a PyFlink job,
plus the Python types the user declares per state (`parse_type`); output is the same tables with
the key unwrapped, the ``python-state-`` prefix dropped and values decoded. What PyFlink stores
(read from PyFlink 2.3.0's `fn_execution` coders and a real job's savepoint,
`tests/fixtures/flink/pyflink/`):

* the key is a Java ``Row`` with one field (`KeyByKeySelector`), key group of ``Row(Row(key))``:
  ``murmur(62 + hashCode(key))``;
* value, list, reducing and aggregating states are all ``ListState<byte[]>`` named
  ``python-state-<name>``; each element holds one or more values written back to back by the
  state's field coder; map states are ``MapState<ByteArrayWrapper, byte[]>`` (key bytes behind the
  wrapper's i32 length);
* field coders: LONG/INT/SHORT/BYTE/FLOAT/DOUBLE big-endian, BOOLEAN one byte, STRING and BYTES
  ``i32 length`` + bytes (UTF-8 for strings), PICKLED ``i32 length`` + a pickle, TUPLE the fields in
  order, ROW a null mask (2 row-kind bits first, MSB first) then the non-null fields.

Thread mode (``python.execution-mode: thread``) differs: states keep their plain names, basic
types are stored by Java serializers, and ROW/TUPLE/PICKLED values as pickles in a ``byte[]`` (a ROW
pickle needs PyFlink to unpickle). Its operators are told apart by the types the user declares.

The types are not in the savepoint (they live in the Python job), so a state without a declared
type keeps its raw bytes. Pickled values stay bytes in tables; `get` unpickles them only when the
savepoint was opened with ``trust_pickled=True``.
"""

from __future__ import annotations

import re
import struct
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from statekit.errors import CorruptSavepointError, InvalidArgumentError, UnsupportedFormatError
from statekit.format.flink.keyed import KeyedLayout, KeyedResult
from statekit.keygroups import compute_key_group_for_key_hash
from statekit.keyhash import java_hash
from statekit.state.descriptors import StateInfo, as_state_kind
from statekit.types import parse_ddl

PREFIX = "python-state-"

_ATOMS = {  # name -> (kind, ddl)
    "LONG": ("long", "bigint"), "BIGINT": ("long", "bigint"),
    "INT": ("int", "int"), "INTEGER": ("int", "int"),
    "SHORT": ("short", "smallint"), "SMALLINT": ("short", "smallint"),
    "BYTE": ("byte", "tinyint"), "TINYINT": ("byte", "tinyint"),
    "FLOAT": ("float", "float"), "DOUBLE": ("double", "double"),
    "BOOLEAN": ("boolean", "boolean"), "STRING": ("string", "string"),
    "BYTES": ("bytes", "binary"), "BINARY": ("bytes", "binary"), "PRIMITIVE_ARRAY(BYTE)": ("bytes", "binary"),
    "PICKLED": ("pickled", "binary"), "PICKLED_BYTE_ARRAY": ("pickled", "binary"),
}
FIXED = {"long": ">q", "int": ">i", "short": ">h", "byte": ">b", "float": ">f", "double": ">d"}


@dataclass(frozen=True)
class PyType:
    """A declared PyFlink type: ``kind`` (atoms above, ``row``, ``tuple``, ``list``, ``map``), children, field names."""

    kind: str
    ddl: str
    children: tuple["PyType", ...] = ()
    names: tuple[str, ...] = ()

    @property
    def pickled(self) -> bool:
        return self.kind == "pickled" or (self.kind in ("list", "reducing", "aggregating")
                                          and self.children[0].kind == "pickled")


def parse_type(spec: str) -> PyType:
    """Parse a PyFlink type as written with ``Types``: ``"LONG"``, ``"ROW(kind STRING, value LONG)"``, ``"LIST(STRING)"``...

    ``LIST(T)`` declares a ListState of T, ``MAP(K, V)`` a MapState, ``REDUCING(T)`` and
    ``AGGREGATING(ACC)`` those kinds (PyFlink stores them like value states); anything else a
    ValueState of that type. SQL names (``bigint``, ``string``...) are accepted too.
    """
    tokens = re.findall(r"[A-Za-z_][A-Za-z_0-9]*|[(),]", spec)
    if "".join(tokens).replace(",", "") != re.sub(r"[\s,]", "", spec):
        raise InvalidArgumentError(f"PyFlink type {spec!r} has characters outside names, parentheses and commas")
    pos = 0

    def peek() -> str | None:
        return tokens[pos] if pos < len(tokens) else None

    def take(expect: str | None = None) -> str:
        nonlocal pos
        if pos >= len(tokens) or (expect is not None and tokens[pos] != expect):
            raise InvalidArgumentError(f"PyFlink type {spec!r}: expected {expect or 'a type'} at token {pos + 1}")
        pos += 1
        return tokens[pos - 1]

    def one() -> PyType:
        name = take().upper()
        if name == "PRIMITIVE_ARRAY" and peek() == "(":
            take("(")
            inner = take().upper()
            take(")")
            if inner not in ("BYTE", "TINYINT"):
                raise InvalidArgumentError(f"PyFlink type {spec!r}: only PRIMITIVE_ARRAY(BYTE) is supported")
            return PyType("bytes", "binary")
        if name in _ATOMS:
            kind, ddl = _ATOMS[name]
            return PyType(kind, ddl)
        if name not in ("ROW", "ROW_NAMED", "TUPLE", "LIST", "MAP", "REDUCING", "AGGREGATING"):
            raise InvalidArgumentError(
                f"PyFlink type {spec!r}: {name} is not supported; use LONG, INT, SHORT, BYTE, FLOAT, DOUBLE, BOOLEAN, "
                "STRING, BYTES, PICKLED, ROW(name TYPE, ...), TUPLE(TYPE, ...), LIST(TYPE), MAP(TYPE, TYPE), "
                "REDUCING(TYPE) or AGGREGATING(ACCUMULATOR TYPE)"
            )
        take("(")
        items: list[tuple[str | None, PyType]] = []
        while True:
            label = None
            if name in ("ROW", "ROW_NAMED") and pos + 1 < len(tokens) and tokens[pos + 1] not in ("(", ",", ")"):
                label = take()
            items.append((label, one()))
            if peek() == ",":
                take(",")
                continue
            take(")")
            break
        kids = tuple(t for _, t in items)
        if name in ("REDUCING", "AGGREGATING"):  # the state's kind; its values are coded as the inner type
            if len(kids) != 1 or kids[0].kind in ("list", "map", "reducing", "aggregating"):
                raise InvalidArgumentError(f"PyFlink type {spec!r}: {name} takes one plain type")
            return PyType(name.lower(), kids[0].ddl, kids)
        if name == "LIST" or name == "MAP":
            if len(kids) != (1 if name == "LIST" else 2) or any(
                    k.kind in ("list", "map", "reducing", "aggregating") for k in kids):
                raise InvalidArgumentError(f"PyFlink type {spec!r}: {name} takes {1 if name == 'LIST' else 2} plain types")
            if name == "LIST":
                return PyType("list", f"array<{kids[0].ddl}>", kids)
            return PyType("map", f"map<{kids[0].ddl},{kids[1].ddl}>", kids)
        names = tuple(label or f"f{i}" for i, (label, _) in enumerate(items))
        ddl = "struct<" + ",".join(f"{n}:{k.ddl}" for n, k in zip(names, kids)) + ">"
        return PyType("row" if name.startswith("ROW") else "tuple", ddl, kids, names)

    t = one()
    if pos != len(tokens):
        raise InvalidArgumentError(f"PyFlink type {spec!r} has trailing tokens")
    return t


def _read(t: PyType, b: bytes, p: int, where: str) -> tuple[Any, int]:
    """One value of field coder `t` at ``b[p:]``, and where it ends."""
    try:
        k = t.kind
        if k in FIXED:
            return struct.unpack_from(FIXED[k], b, p)[0], p + struct.calcsize(FIXED[k])
        if k == "boolean":
            return b[p] != 0, p + 1
        if k in ("string", "bytes", "pickled"):
            n = struct.unpack_from(">i", b, p)[0]
            if n < 0 or p + 4 + n > len(b):
                raise CorruptSavepointError(f"{where}: a length {n} runs past the end of the value")
            raw = b[p + 4 : p + 4 + n]
            return (raw.decode("utf-8") if k == "string" else raw), p + 4 + n
        if k == "tuple":
            out = {}
            for n, c in zip(t.names, t.children):
                out[n], p = _read(c, b, p, where)
            return out, p
        if k == "row":
            nbits = 2 + len(t.children)
            mask = b[p : p + (nbits + 7) // 8]
            p += (nbits + 7) // 8
            out = {}
            for i, (n, c) in enumerate(zip(t.names, t.children)):
                bit = 2 + i
                if (mask[bit // 8] >> (7 - bit % 8)) & 1:
                    out[n] = None
                else:
                    out[n], p = _read(c, b, p, where)
            return out, p
    except (struct.error, IndexError, UnicodeDecodeError) as exc:
        raise CorruptSavepointError(f"{where}: the bytes do not decode as {t.ddl} ({exc})") from None
    raise InvalidArgumentError(f"{where}: {t.kind} is not a field type")


def _values(t: PyType, chunks: list[bytes], where: str) -> list[Any]:
    out = []
    for c in chunks:
        p = 0
        while p < len(c):
            v, p = _read(t, c, p, where)
            out.append(v)
    return out


def is_pyflink(lay: KeyedLayout, declared: bool = False) -> bool:
    """Whether an operator's keyed state is a PyFlink operator's: a one-field Row key and ``python-state-`` states
    (process mode), or a one-field Row key and types the user `declared` for it (thread mode names states plainly)."""
    return (lay.key_type.kind == "row" and len(lay.key_type.children) == 1
            and (declared or any(s.name.startswith(PREFIX) for s in lay.states)))


def key_ddl(lay: KeyedLayout) -> str:
    """The DDL type of the user key of a PyFlink keyed layout."""
    return lay.key_type.children[0].ddl()


def key_group(key: Any, lay: KeyedLayout, max_parallelism: int) -> int:
    """The key group PyFlink's Java side assigns (the hash of ``Row(Row(key))``: 31 + (31 + h))."""
    h = java_hash(key, key_ddl(lay))
    return compute_key_group_for_key_hash(((62 + h + (1 << 31)) % (1 << 32)) - (1 << 31), max_parallelism)


def states(lay: KeyedLayout, types: dict[str, str]) -> list[tuple[str, str, str, bool]]:
    """(name, kind, ddl, pickled) per state; undeclared ones keep their stored form.

    Process mode stores coder bytes (decoded here by the declared type). Thread mode stores basic
    types with Java serializers (already decoded; declaring them changes nothing) and everything else
    (ROW, TUPLE, PICKLED...) as a pickle in a ``byte[]``: those are marked pickled.
    """
    plain = {(s.name[len(PREFIX):] if s.name.startswith(PREFIX) else s.name) for s in lay.states}
    unknown = set(types) - plain
    if unknown:
        raise InvalidArgumentError(
            f"pyflink_types names states {sorted(unknown)} that the operator does not have; it has {sorted(plain)}"
        )
    from statekit.format.flink.keyed import state_ddl

    out: list[tuple[str, str, str, bool]] = []
    for s in lay.states:
        coded = s.name.startswith(PREFIX)
        name = s.name[len(PREFIX):] if coded else s.name
        spec = types.get(name)
        if spec is None:
            out.append((name, s.keyed_kind or "value", state_ddl(s), False))
            continue
        t = parse_type(spec)
        if (t.kind == "map") != (s.keyed_kind == "map"):
            raise InvalidArgumentError(
                f"PyFlink state {name!r} is a {'MapState' if s.keyed_kind == 'map' else 'value/list state'} but is "
                f"declared {spec!r}; declare MAP(K, V) exactly for map states"
            )
        if not coded:  # thread mode: Java keeps reducing/aggregating state as value state
            inner = t.children[0] if t.kind in ("reducing", "aggregating") else t
            pickled = s.value_type.kind == "bytes" and inner.kind in ("row", "tuple", "pickled")
            kind = t.kind if t.kind in ("reducing", "aggregating") and s.keyed_kind == "value" else s.keyed_kind
            out.append((name, kind or "value", state_ddl(s), pickled))
            continue
        stored = state_ddl(s)
        if stored not in ("array<binary>", "map<binary,binary>"):  # e.g. a TTL-wrapped state
            raise UnsupportedFormatError(
                f"PyFlink state {name!r} is stored with serializer {s.value_type.serializer} ({stored}), not as "
                "PyFlink's plain byte lists or maps; statekit decodes PyFlink states without TTL. Leave it out of "
                "pyflink_types to read its stored form."
            )
        kind = t.kind if t.kind in ("map", "list", "reducing", "aggregating") else "value"
        out.append((name, kind, t.ddl, t.pickled))
    return out


def decode(result: KeyedResult, lay: KeyedLayout, types: dict[str, str], where: str) -> KeyedResult:
    """The keyed and timers tables of a PyFlink operator: key unwrapped, states renamed and decoded."""
    table = result.table
    cols: dict[str, pa.Array] = {}
    for name in table.column_names:
        col = table.column(name).combine_chunks()
        if name == "key":
            cols["key"] = col.field(0)
        elif name.startswith(PREFIX):
            short = name[len(PREFIX):]
            spec = types.get(short)
            cols[short] = col if spec is None else _decode_column(col, parse_type(spec), f"{where} state {short!r}")
        else:
            cols[name] = col
    timers = result.timers
    if "key" in timers.column_names:
        timers = timers.set_column(timers.column_names.index("key"), "key",
                                   timers.column("key").combine_chunks().field(0))
    return KeyedResult(pa.table(cols), timers)


def _decode_column(col: pa.Array, t: PyType, where: str) -> pa.Array:
    rows = col.to_pylist()
    out: list[Any] = []
    if t.kind == "map":
        kt, vt = t.children
        for entries in rows:
            if entries is None:
                out.append(None)
                continue
            m = []
            for k, v in entries:
                if len(k) < 4 or int.from_bytes(k[:4], "big") != len(k) - 4:
                    raise CorruptSavepointError(f"{where}: a map key does not carry its wrapper's length")
                key, end = _read(kt, k, 4, where)
                val = None if v is None else _values(vt, [v], where)
                if end != len(k) or (val is not None and len(val) != 1):
                    raise CorruptSavepointError(f"{where}: a map entry does not decode as one {kt.ddl} -> {vt.ddl}")
                m.append((key, None if val is None else val[0]))
            out.append(m)
        return pa.array(out, parse_ddl(t.ddl))
    elem = t.children[0] if t.kind in ("list", "reducing", "aggregating") else t
    for chunks in rows:
        if chunks is None:
            out.append(None)
            continue
        vals = _values(elem, chunks, where)
        if t.kind == "list":
            out.append(vals)
        elif len(vals) == 1:
            out.append(vals[0])
        else:
            raise CorruptSavepointError(
                f"{where}: holds {len(vals)} values of {t.ddl}, so it is not a value state of that type; declare "
                f"it LIST({'...' if not vals else 'TYPE'}) if it is a ListState, or check the declared type"
            )
    return pa.array(out, parse_ddl(t.ddl))


class PyFlinkKind:
    """The `statekit.format.flink.kinds.JobKind` of PyFlink operators (see the module docstring)."""

    name = "pyflink"

    def key_ddl(self, lay: KeyedLayout) -> str:
        return key_ddl(lay)

    def states(self, lay: KeyedLayout, declared: dict[str, str]) -> tuple[StateInfo, ...]:
        return tuple(StateInfo(n, as_state_kind(k), t, pickled=p) for n, k, t, p in states(lay, declared))

    def decode(self, result: KeyedResult, lay: KeyedLayout, declared: dict[str, str], where: str) -> KeyedResult:
        return decode(result, lay, declared, where)

    def key_value(self, key: Any, lay: KeyedLayout) -> Any:
        return key

    def key_group(self, key: Any, lay: KeyedLayout, max_parallelism: int) -> int | None:
        return key_group(key, lay, max_parallelism)

    def key_groups(self, keys: list[Any], lay: KeyedLayout, max_parallelism: int) -> list[int] | None:
        return None  # `check` hashes these keys by their declared type (`statekit.format.keyed.compute_key_groups`)

    def key_bytes(self, key: Any, lay: KeyedLayout) -> bytes | None:
        return None  # keys are Row-wrapped: the general path matches them in the key group's table

    def operator_kind(self, name: str, lay: KeyedLayout | None) -> str | None:
        return None

    def unsupported(self, lay: KeyedLayout) -> list[str]:
        return []


KIND = PyFlinkKind()
