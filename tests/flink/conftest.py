"""Real Apache Flink 2.3.0 for the `flink` tests: the harness (tests/flink/java) is compiled once per session;
without a JDK or Maven every such test is skipped with a message saying so."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))  # flink_harness, shared with bench/flink_write.py

import flink_harness  # noqa: E402

CORPUS = Path(__file__).resolve().parents[1] / "fixtures" / "flink" / "2.3.0"


@pytest.fixture(scope="session")
def flink():
    """The `flink_harness` module, its Maven project built (skips when java or mvn is missing)."""
    why = flink_harness.missing_tools()
    if why:
        pytest.skip(why)
    flink_harness.build()
    return flink_harness
