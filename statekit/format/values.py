"""The value decoder: stored Arrow values (``to_pylist()`` output) to the Python values state handles hold."""

from __future__ import annotations

import pickle
from typing import Any, Callable

import pyarrow as pa

from statekit import serde
from statekit.state.descriptors import StateInfo

__all__ = ["python_converter", "state_value_decoder", "unpickle_values"]


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


def state_value_decoder(info: StateInfo, *, trusted: bool) -> Callable[[Any], Any]:
    """The one decoder of stored keyed-state values: a stored value (``to_pylist()`` output) of state
    `info` to the Python value its handle holds.

    Used by `Savepoint.get`, the reader functions (local and Spark) and restores alike, so all give the
    same shapes: map state (also nested in lists or structs) is a dict, with struct map keys as tuples;
    lists are lists, structs dicts; pickled values are unpickled, which `trusted` must allow
    (`UntrustedPickleError` otherwise, raised when a pickled value is decoded).

    >>> from statekit.state.descriptors import StateInfo
    >>> state_value_decoder(StateInfo("m", "map", "map<string,bigint>"), trusted=False)([("a", 1)])
    {'a': 1}
    """
    if info.pickled:
        where = f"state {info.name!r}"
        if info.kind == "list":
            return lambda v: None if v is None else serde.loads_many(v, trusted=trusted, where=where)
        if info.kind == "map":
            kf = python_converter(info.arrow_type.key_type, hashable=True) or (lambda k: k)
            return lambda v: None if v is None else {
                kf(k): serde.loads(x, trusted=trusted, where=where) for k, x in v
            }
        return lambda v: None if v is None else serde.loads(v, trusted=trusted, where=where)
    return python_converter(info.arrow_type) or (lambda v: v)


def unpickle_values(info: StateInfo, values: list[Any], *, trusted: bool) -> list[Any]:
    """Pickled values of a state column (``to_pylist()`` output) as Python values; refuses unless `trusted`."""
    where = f"state {info.name!r}"
    serde.loads(None, trusted=trusted, where=where)  # raises UntrustedPickleError unless trusted
    loads = pickle.loads
    if info.kind == "list":
        return [[None if x is None else loads(x) for x in v] for v in values]
    if info.kind == "map":
        kf = python_converter(info.arrow_type.key_type, hashable=True) or (lambda k: k)
        return [{kf(k): None if x is None else loads(x) for k, x in v} for v in values]
    return [loads(v) for v in values]
