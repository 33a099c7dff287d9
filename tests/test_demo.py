"""The README's main job (`statekit demo`) runs end to end and checks its own result."""

from __future__ import annotations

import io

import pytest

from statekit.demo import run_demo
from statekit.savepoint import Savepoint, check
from statekit_cli.common import PlainConsole


@pytest.mark.spark
def test_demo_runs_end_to_end(spark, tmp_path):
    out = io.StringIO()
    # The console `statekit demo` prints to when stdout is a pipe or a file (`make demo > log`, CI)
    run_demo(tmp_path / "demo", use_spark=True, console=PlainConsole(out), users=500)
    text = out.getvalue()
    assert "Spark SQL" in text and "OK" in text and "MISMATCH" not in text
    assert "[bold]" not in text and "[/" not in text and "\x1b[" not in text, text
    assert text.splitlines()[3].startswith("4. Spark SQL: {'overdrawn': "), text
    for name in ("savepoint-1", "savepoint-2", "savepoint-3", "savepoint-4"):
        assert check(tmp_path / "demo" / name).ok
    assert Savepoint.open(tmp_path / "demo" / "savepoint-2").operator("accounts-v2").key_type == "string"
