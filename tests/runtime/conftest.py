"""Fixtures of the runtime tests: one run per state backend, a manual clock, a scratch directory."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from statekit.backends.base import SUPPORTED_BACKENDS
from statekit.runtime import ManualClock

sys.path.insert(0, str(Path(__file__).parent))  # the shared jobs in jobs.py (also run by child processes)


def _available(name: str) -> bool:
    return importlib.util.find_spec(f"statekit.backends.{name}") is not None


@pytest.fixture(params=SUPPORTED_BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    if not _available(request.param):
        pytest.skip(f"the {request.param} backend is not available in this checkout")
    return request.param


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(1_000)
