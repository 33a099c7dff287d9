"""The keyed state backend of a name: `create_keyed_backend` (the runtime's one choice of backend).

Apart from `base` so that the backends, which import `base`, are not imported back by it.
"""

from __future__ import annotations

from typing import Any

from statekit.backends.base import SUPPORTED_BACKENDS, BackendName, KeyedStateBackend
from statekit.errors import InvalidArgumentError

__all__ = ["create_keyed_backend"]


def create_keyed_backend(name: BackendName, **kwargs: Any) -> KeyedStateBackend:
    """Instantiate the keyed backend called `name` ("heap" or "rocksdb")."""
    if name == "heap":
        from statekit.backends.heap import HeapKeyedStateBackend

        return HeapKeyedStateBackend(**kwargs)
    if name == "rocksdb":
        from statekit.extras import require

        require("rocksdb", "state_backend='rocksdb'")
        from statekit.backends.rocksdb import RocksDBKeyedStateBackend

        return RocksDBKeyedStateBackend(**kwargs)
    raise InvalidArgumentError(f"unknown state backend {name!r}; choose one of {', '.join(SUPPORTED_BACKENDS)}.")
