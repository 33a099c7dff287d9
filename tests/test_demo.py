"""The README's main job (`statekit demo`) runs end to end and checks its own result."""

from __future__ import annotations

import io

import pytest
from rich.console import Console

from statekit.demo import run_demo
from statekit.savepoint import Savepoint, check


@pytest.mark.spark
def test_demo_runs_end_to_end(spark, tmp_path):
    out = io.StringIO()
    run_demo(tmp_path / "demo", use_spark=True, console=Console(file=out, width=200), users=500)
    text = out.getvalue()
    assert "Spark SQL" in text and "OK" in text and "MISMATCH" not in text
    for name in ("savepoint-1", "savepoint-2", "savepoint-3", "savepoint-4"):
        assert check(tmp_path / "demo" / name).ok
    assert Savepoint.open(tmp_path / "demo" / "savepoint-2").operator("accounts-v2").key_type == "string"
