"""Key typing and routing: infer a key's Flink type, and send each element to the subtask owning its key group."""

from __future__ import annotations

import numbers
from typing import Any, Callable

import numpy as np
import pyarrow as pa

from statekit.errors import StateTypeError
from statekit.keygroups import assign_to_key_group
from statekit.types import to_arrow

#: Bound on the per-edge routing cache; beyond it, keys are routed without caching.
ROUTING_CACHE_SIZE = 1 << 20


def infer_key_type(key: Any) -> pa.DataType:
    """The Arrow key type a Python key implies (the same inference `statekit.keygroups.java_hash` makes).

    Examples
    --------
    >>> infer_key_type(3), infer_key_type("a"), infer_key_type((1, "x"))
    (DataType(int64), DataType(string), StructType(struct<f0: int64, f1: string>))
    """
    if isinstance(key, (bool, np.bool_)):
        return pa.bool_()
    if isinstance(key, np.integer):
        return pa.from_numpy_dtype(key.dtype)
    if isinstance(key, numbers.Integral):
        return pa.int64()
    if isinstance(key, np.float32):
        return pa.float32()
    if isinstance(key, float):
        return pa.float64()
    if isinstance(key, str):
        return pa.string()
    if isinstance(key, tuple):
        return pa.struct([pa.field(f"f{i}", infer_key_type(v)) for i, v in enumerate(key)])
    raise StateTypeError(
        f"cannot infer a key type for {key!r} ({type(key).__name__}); pass key_by(selector, key_type=...) "
        "with a DDL string such as 'bigint', 'string' or 'struct<a:int,b:string>'"
    )


def normalise_key_type(key_type: Any) -> pa.DataType | None:
    """A declared key type (DDL, pyarrow, Python type, PyFlink ``Types.*()``) as an Arrow type."""
    return None if key_type is None else to_arrow(key_type)


def hash_router(
    selector: Callable[[Any], Any],
    key_type: pa.DataType | None,
    max_parallelism: int,
    targets: list[Callable[[Any, Any, Any, int], None]],
) -> Callable[[Any, Any], None]:
    """An output that routes each element to ``targets[kg * p // m]`` exactly as Flink's KeyGroupStreamPartitioner.

    The key group of a key is computed once and cached with its target, because hashing a string
    key in Python costs far more than a dict lookup and streams repeat their keys.
    """
    m, p = max_parallelism, len(targets)
    cache: dict[Any, tuple[int, Callable]] = {}
    get = cache.get

    def route(value: Any, ts: Any) -> None:
        key = selector(value)
        try:
            hit = get(key)
        except TypeError:  # unhashable key (a dict for a struct): no cache
            kg = assign_to_key_group(key, m, key_type)
            targets[kg * p // m](value, ts, key, kg)
            return
        if hit is None:
            kg = assign_to_key_group(key, m, key_type)
            hit = (kg, targets[kg * p // m])
            if len(cache) < ROUTING_CACHE_SIZE:
                cache[key] = hit
        hit[1](value, ts, key, hit[0])

    return route


def selector_of(key_selector: Any) -> Callable[[Any], Any]:
    """``KeySelector.get_key`` or the callable itself."""
    get_key = getattr(key_selector, "get_key", None)
    if get_key is not None:
        return get_key
    if callable(key_selector):
        return key_selector
    raise StateTypeError(f"key selector {key_selector!r} is neither callable nor a KeySelector")
