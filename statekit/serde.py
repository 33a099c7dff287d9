"""Opt-in pickling of values without a declared type; never unpickles unless the caller trusts the data."""

from __future__ import annotations

import pickle
from typing import Any, Iterable

from statekit.errors import UntrustedPickleError

# Protocol 5 is available on every supported Python and is the most compact.
PICKLE_PROTOCOL = 5


def dumps(value: Any) -> bytes:
    """Pickle one value for storage in a ``binary`` column declared ``PICKLED``."""
    return pickle.dumps(value, protocol=PICKLE_PROTOCOL)


def loads(payload: bytes | None, *, trusted: bool, where: str = "state") -> Any:
    """Unpickle `payload` only if `trusted`; otherwise raise `UntrustedPickleError`.

    Unpickling runs arbitrary code, so the caller must say explicitly that it trusts the source.
    """
    if not trusted:
        raise UntrustedPickleError(
            f"{where} holds pickled values; unpickling runs arbitrary code. Pass trust_pickled=True "
            "only if you trust where this state came from, or read the raw bytes instead."
        )
    return None if payload is None else pickle.loads(payload)


def loads_many(payloads: Iterable[bytes | None], *, trusted: bool, where: str = "state") -> list[Any]:
    """Unpickle a sequence of payloads under the same trust rule as `loads`."""
    if not trusted:
        loads(None, trusted=False, where=where)
    return [None if p is None else pickle.loads(p) for p in payloads]
