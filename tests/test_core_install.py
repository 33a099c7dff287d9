"""statekit's core install (no extras: no pyspark, delta-spark or rocksdict) reads, queries, checks and repairs statekit
and Flink savepoints from the CLI, and a call needing an extra fails with a typed error naming the install.

The core venv holds exactly pyproject.toml's `dependencies`, installed once from PyPI into statekit's cache outside
the checkout (`venv_cache`); statekit itself runs from this checkout (on PYTHONPATH), so the test follows the code.
"""

from __future__ import annotations

import json
import os
import subprocess
import tomllib
from pathlib import Path

import pytest

from statekit.demo import write_demo_savepoint
from statekit.savepoint import Savepoint, check

from .venv_cache import cached_venv

ROOT = Path(__file__).resolve().parents[1]
FLINK = ROOT / "tests" / "fixtures" / "flink" / "2.3.0" / "long-hashmap-canonical" / "savepoint"
CORE = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]


@pytest.fixture(scope="module")
def core(tmp_path_factory):
    """(python of the core venv, environment that runs this checkout's statekit with it)."""
    python, seconds = cached_venv("core-venv", CORE, probe="import pyarrow, numpy, duckdb, typer, rich, cramjam")
    if seconds is not None:
        print(f"created the core venv in {seconds:.0f} s")
    path = tmp_path_factory.mktemp("core-path")
    (path / "statekit").symlink_to(ROOT / "statekit")
    (path / "statekit_cli").symlink_to(ROOT / "cli")  # installed as statekit_cli, as pyproject maps it
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV"))}
    env.update(PYTHONPATH=str(path), PYTHONNOUSERSITE="1", COLUMNS="200")
    return str(python), env


def run(core, *args, cwd: Path) -> subprocess.CompletedProcess:
    python, env = core
    return subprocess.run([python, "-m", "statekit_cli.app", *map(str, args)], capture_output=True, text=True,
                          env=env, cwd=cwd, timeout=300)


def test_the_core_venv_has_no_extras(core):
    python, env = core
    for module in ("pyspark", "delta", "rocksdict"):
        p = subprocess.run([python, "-c", f"import {module}"], capture_output=True, text=True, env=env)
        assert p.returncode != 0 and "ModuleNotFoundError" in p.stderr, (module, p.stderr)
    p = subprocess.run([python, "-c", "import statekit, statekit_cli; print(statekit.__file__)"], capture_output=True,
                       text=True, env=env)
    assert p.returncode == 0 and p.stdout.strip() == str(ROOT / "statekit" / "__init__.py"), p.stderr


@pytest.mark.parametrize("kind", ["statekit", "flink"])
def test_read_and_repair_commands_without_extras(core, tmp_path, kind):
    sp = write_demo_savepoint(tmp_path / "sp", users=200) if kind == "statekit" else FLINK
    uid, key, state = ("accounts", "user-00007", "balance") if kind == "statekit" else ("counter", "-1", "count")
    value = "12.5" if kind == "statekit" else "12"
    reads = [["inspect", sp], ["inspect", sp, "--json"], ["check", sp], ["show", sp, "--uid", uid, "--limit", "3"],
             ["get", sp, "--uid", uid, "--key", key, "--json"], ["diff", sp, sp],
             ["query", sp, f"SELECT count(*) AS n FROM {uid}.keyed"], ["export", sp, tmp_path / "export"]]
    for args in reads:
        r = run(core, *args, cwd=tmp_path)
        assert r.returncode == 0, (args, r.stderr)
        assert r.stdout.strip(), args
    before = json.loads(run(core, "get", sp, "--uid", uid, "--key", key, "--json", cwd=tmp_path).stdout)

    (tmp_path / "plan.json").write_text(json.dumps([{"edit": "set", "uid": uid, "key": json.loads(key)
                                                     if kind == "flink" else key, "state": state, "value": 99}]))
    repairs = {
        "set": ["set", sp, tmp_path / "set", "--uid", uid, "--key", key, "--state", state, "--value", value, "--apply"],
        "delete-key": ["delete-key", sp, tmp_path / "delete-key", "--uid", uid, "--key", key, "--apply"],
        "rename-uid": ["rename-uid", sp, tmp_path / "rename-uid", "--uid", uid, "--new-uid", f"{uid}-v2", "--apply"],
        "set-max-parallelism": ["set-max-parallelism", sp, tmp_path / "set-max-parallelism", "--uid", uid, "--max",
                                "256", "--apply"],
        "repair": ["repair", sp, tmp_path / "repair", "--plan", tmp_path / "plan.json", "--apply"],
    }
    for name, args in repairs.items():
        r = run(core, *args, cwd=tmp_path)
        assert r.returncode == 0, (name, r.stderr)
        assert check(tmp_path / name).ok, name
    assert Savepoint.open(tmp_path / "set").get(uid, json.loads(key) if kind == "flink" else key)[state] == float(value)
    assert Savepoint.open(tmp_path / "delete-key").get(uid, json.loads(key) if kind == "flink" else key) is None
    assert Savepoint.open(tmp_path / "rename-uid").operator(f"{uid}-v2").uid_hash != Savepoint.open(sp).operator(uid).uid_hash
    assert Savepoint.open(tmp_path / "set-max-parallelism").operator(uid).max_parallelism == 256
    assert Savepoint.open(tmp_path / "repair").get(uid, json.loads(key) if kind == "flink" else key)[state] == 99
    # the source is never modified
    assert json.loads(run(core, "get", sp, "--uid", uid, "--key", key, "--json", cwd=tmp_path).stdout) == before


def test_calls_needing_an_extra_name_the_install(core, tmp_path):
    python, env = core
    p = subprocess.run([python, "-c", "import statekit.spark"], capture_output=True, text=True, env=env)
    assert p.returncode == 1 and "statekit.errors.MissingExtraError" in p.stderr, p.stderr
    assert "pip install 'statekit[spark]'" in p.stderr, p.stderr
    p = subprocess.run([python, "-c", "from statekit.runtime import StreamExecutionEnvironment as E\n"
                        "E(state_backend='rocksdb').from_collection([1, 2]).key_by(lambda v: v, key_type='bigint')"
                        ".reduce(lambda a, b: a + b, output_type='bigint').uid('r').execute_and_collect()"],
                       capture_output=True, text=True, env=env)
    assert p.returncode == 1 and "MissingExtraError" in p.stderr and "pip install 'statekit[rocksdb]'" in p.stderr, \
        p.stderr
    sp = write_demo_savepoint(tmp_path / "sp", users=20)
    for args in (["query", sp, "SELECT 1", "--engine", "spark"], ["export", sp, tmp_path / "d", "--format", "delta"]):
        r = run(core, *args, cwd=tmp_path)
        assert r.returncode != 0 and "Traceback" not in r.stderr, r.stderr
        assert "error: MissingExtraError" in r.stderr and "pip install 'statekit[spark]'" in r.stderr, r.stderr
        assert len(r.stderr.strip().splitlines()) == 1, r.stderr
