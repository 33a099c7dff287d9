"""Key typing and routing: infer a key's Flink type, and send each element to the subtask owning its key group."""

from __future__ import annotations

import numbers
from typing import Any, Callable

import numpy as np
import pyarrow as pa

from statekit.errors import InvalidKeyError, StateTypeError
from statekit.keygroups import assign_key_groups, assign_to_key_group
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
    operators: list[Any] | None = None,
) -> Callable[[Any, Any], None]:
    """An output that routes each element to ``targets[kg * p // m]`` exactly as Flink's KeyGroupStreamPartitioner.

    The key group of a key is computed once and cached with its target, because hashing a string
    key in Python costs far more than a dict lookup and streams repeat their keys. When the
    targets are keyed process operators (``operators``), routing and processing are fused: the
    cache holds each key's subtask scope setter and user function, so an element costs one key
    extraction, one dict lookup and the user's own calls. The router also has ``batch(values,
    ts)`` (sources hand it whole batches) and ``prefetch(values)`` (vectorised key groups for the
    new keys of a batch).
    """
    m, p = max_parallelism, len(targets)
    cache: dict[Any, tuple] = {}
    get = cache.get
    fused = operators is not None and all(getattr(op, "fusable", False) for op in operators)

    if fused:

        def entry(key: Any, kg: int) -> tuple:
            op = operators[kg * p // m]  # type: ignore[index]
            if op.backend is None:
                op.ensure_backend(key)
            return (kg, op, op.backend.set_current_key, op.ctx, op.call)

    else:

        def entry(key: Any, kg: int) -> tuple:
            return (kg, targets[kg * p // m])

    def miss(key: Any) -> tuple:
        hit = entry(key, assign_to_key_group(key, m, key_type))
        try:
            if len(cache) < ROUTING_CACHE_SIZE:
                cache[key] = hit
        except TypeError:  # unhashable key (a dict for a struct): not cached
            pass
        return hit

    if fused:

        def route(value: Any, ts: Any) -> None:
            key = selector(value)
            try:
                hit = get(key)
            except TypeError:
                hit = None
            if hit is None:
                hit = miss(key)
            kg, op, scope, ctx, call = hit
            scope(key, kg)
            ctx._ts = ts
            out = call(value, ctx)
            if out is not None:
                emit = op.emit
                for o in out:
                    emit(o, ts)

        def batch(values: list[Any], ts: Any) -> None:
            # `route` inlined: this loop is the whole per-element cost of a source → keyed job.
            # A batch shares one timestamp and nothing else touches these contexts until it ends
            # (timers fire between batches), so the contexts are stamped once, not per element.
            for op in operators:  # type: ignore[union-attr]
                op.ctx._ts = ts
            for value in values:
                key = selector(value)
                try:
                    hit = get(key)
                except TypeError:
                    hit = None
                if hit is None:
                    hit = miss(key)
                kg, op, scope, ctx, call = hit
                scope(key, kg)
                out = call(value, ctx)
                if out is not None:
                    emit = op.emit
                    for o in out:
                        emit(o, ts)

    else:

        def route(value: Any, ts: Any) -> None:
            key = selector(value)
            try:
                hit = get(key)
            except TypeError:
                hit = None
            if hit is None:
                hit = miss(key)
            hit[1](value, ts, key, hit[0])

        def batch(values: list[Any], ts: Any) -> None:
            for value in values:
                route(value, ts)

    def prefetch(values: list[Any]) -> float:
        """Fill the cache for a batch with one vectorised key-group computation; returns the miss rate.

        Sources call this before emitting a batch while many keys are new, because hashing keys
        one by one in Python is the dominant cost of a stream's first pass over its key space.
        """
        if not values:
            return 0.0
        try:
            missing = list({k for k in map(selector, values) if k not in cache})
        except TypeError:  # unhashable keys: the per-element path handles them
            return 0.0
        if missing and len(cache) + len(missing) <= ROUTING_CACHE_SIZE:
            try:
                groups = assign_key_groups(missing, m, key_type).tolist()
            except (StateTypeError, InvalidKeyError, ValueError, TypeError):
                return 0.0  # mixed or odd keys: leave them to the exact scalar path
            for k, kg in zip(missing, groups):
                cache[k] = entry(k, kg)
        return len(missing) / len(values)

    route.batch = batch  # type: ignore[attr-defined]
    route.prefetch = prefetch  # type: ignore[attr-defined]
    return route


def selector_of(key_selector: Any) -> Callable[[Any], Any]:
    """``KeySelector.get_key`` or the callable itself."""
    get_key = getattr(key_selector, "get_key", None)
    if get_key is not None:
        return get_key
    if callable(key_selector):
        return key_selector
    raise StateTypeError(f"key selector {key_selector!r} is neither callable nor a KeySelector")
