"""Run `statekit` both through typer's runner (in process) and as the installed executable."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from typer.testing import CliRunner

from statekit.testing import tree_digest

EXECUTABLE = Path(sys.executable).parent / "statekit"


@dataclass
class Run:
    exit_code: int
    stdout: str
    stderr: str

    @property
    def output(self) -> str:
        return self.stdout + self.stderr


def run_runner(args: list[str], env: dict | None = None) -> Run:
    from statekit_cli.app import app

    result = CliRunner().invoke(app, [str(a) for a in args], env={"COLUMNS": "200", **(env or {})})
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    stderr = result.stderr if hasattr(result, "stderr") else ""
    return Run(result.exit_code, result.stdout, stderr)


def run_executable(args: list[str], env: dict | None = None, cwd: Path | None = None) -> Run:
    full_env = {**os.environ, "COLUMNS": "200", **(env or {})}
    p = subprocess.run([str(EXECUTABLE), *map(str, args)], capture_output=True, text=True, env=full_env, cwd=cwd,
                       timeout=300)
    return Run(p.returncode, p.stdout, p.stderr)


@pytest.fixture(params=["runner", "executable"])
def cli(request):
    """Call as ``cli([...])``: the same command through both front doors."""
    return run_runner if request.param == "runner" else run_executable



@pytest.fixture
def digest():
    """`statekit.testing.tree_digest` for test modules (conftest is not importable under importlib mode)."""
    return tree_digest
