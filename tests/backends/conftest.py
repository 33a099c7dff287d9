"""Fixtures for backend tests: a backend factory parametrised over every supported backend, a manual clock."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest

from statekit.backends.base import SUPPORTED_BACKENDS
from statekit.backends.create import create_keyed_backend
from statekit.keygroups import KeyGroupRange, assign_to_key_group
from statekit.testing import ManualClock


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(1_000)


@pytest.fixture(params=SUPPORTED_BACKENDS)
def backend_name(request: pytest.FixtureRequest) -> str:
    return request.param


@pytest.fixture
def make_backend(backend_name: str, tmp_path: Any, clock: ManualClock):
    """Build backends of the parametrised kind; each gets its own RocksDB directory under tmp_path."""
    made: list[Any] = []

    def make(
        *,
        key_type: pa.DataType = pa.string(),
        max_parallelism: int = 128,
        key_group_range: KeyGroupRange | None = None,
        trust_pickled: bool = False,
        **options: Any,
    ) -> Any:
        if backend_name == "rocksdb":
            # a tiny write-back cache, so tests exercise flushes and reads from RocksDB, not just dicts
            options.setdefault("cache_entries", 2)
        backend = create_keyed_backend(
            backend_name,
            key_type=key_type,
            max_parallelism=max_parallelism,
            key_group_range=key_group_range or KeyGroupRange(0, max_parallelism - 1),
            clock=clock,
            directory=tmp_path / f"{backend_name}-{len(made)}",
            trust_pickled=trust_pickled,
            **options,
        )
        made.append(backend)
        return backend

    yield make
    for backend in made:
        backend.close()


@pytest.fixture
def backend(make_backend):
    return make_backend()


def _at(backend: Any, key: Any, namespace: Any = None) -> None:
    """Scope `backend` to `key` (with its Flink key group) and `namespace`, as the runtime does."""
    backend.set_current_key(key, assign_to_key_group(key, backend.max_parallelism, backend.key_type))
    backend.set_current_namespace(namespace)


@pytest.fixture
def at():
    """``at(backend, key, namespace=None)`` scopes a backend the way the runtime does per record."""
    return _at
