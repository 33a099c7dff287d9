"""Fixtures of the runtime tests: one run per state backend, a manual clock, a scratch directory."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from statekit.backends.base import SUPPORTED_BACKENDS
from statekit.runtime import ManualClock

sys.path.insert(0, str(Path(__file__).parent))  # the shared jobs in jobs.py (also run by child processes)


@pytest.fixture(params=SUPPORTED_BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    return request.param


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(1_000)
