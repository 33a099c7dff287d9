"""Real Apache Flink for the `flink` tests: the harness (tests/flink/java) is compiled once per Flink version line
(2.3 by default; `flink_line(line)` for the others), cached across sessions; without a JDK or Maven every such test
is skipped with a message saying so."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))  # flink_harness, shared with bench/flink_write.py

import flink_harness  # noqa: E402

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "flink"
CORPUS = FIXTURES / "2.3.0"


@pytest.fixture(scope="session")
def flink():
    """The `flink_harness` module, its Maven project built (skips when java or mvn is missing)."""
    why = flink_harness.missing_tools()
    if why:
        pytest.skip(why)
    flink_harness.build()
    return flink_harness


@pytest.fixture(scope="session")
def flink_line():
    """``flink_line("1.20")``: the `flink_harness` module with that version line's harness built (once per session)."""
    why = flink_harness.missing_tools()
    if why:
        pytest.skip(why)

    def built(line: str):
        flink_harness.build(line)
        return flink_harness

    return built
