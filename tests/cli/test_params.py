"""cli/params.py's coercion without pydantic is in effect with the typer pyproject.toml allows: a one-shot command
never imports pydantic (0.15-0.23 s of each command's start-up), and gives the values typer itself gives."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "v1"

PROBE = """
import sys
from statekit_cli.app import main
sys.argv = ["statekit", *sys.argv[1:]]
try:
    main()
except SystemExit as exc:
    assert exc.code in (0, None), exc.code
print("pydantic" in sys.modules, file=sys.stderr)
"""


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", PROBE, *args], capture_output=True, text=True, timeout=120)


def test_one_shot_commands_do_not_import_pydantic() -> None:
    for args in (["inspect", str(GOLDEN)], ["get", str(GOLDEN), "--uid", "counter", "--key", "1", "--json"],
                 ["show", str(GOLDEN), "--uid", "counter", "--limit", "2"]):
        r = _run(*args)
        assert r.returncode == 0, r.stderr
        assert r.stderr.strip().splitlines()[-1] == "False", f"{args}: pydantic imported; is typer still 0.29?"
