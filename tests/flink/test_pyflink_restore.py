"""Acceptance: a real PyFlink job (`apache-flink` from PyPI) restores statekit-written savepoints of its Python state.

Two savepoints, each restored by `pyflink_restore_job.py` (the Counter of the PyFlink fixture's job: same uid,
state names and PyFlink types), which writes back every restored value and fired timer:
* the committed PyFlink savepoint (`tests/fixtures/flink/pyflink/`) read with its types, re-keyed (alice ->
  alicia) and rescaled 128 -> 256 on the way to Flink (key groups of PyFlink's Row-wrapped keys recomputed);
* a fresh bootstrap: a statekit savepoint of plain DDL columns, written as PyFlink's coder bytes.

PyFlink runs from `STATEKIT_PYFLINK_PYTHON` (a python with `pyflink`) or, without it, from a venv cached outside
the checkout (`~/.cache/statekit/pyflink-venv-*`, or under `$STATEKIT_CACHE_DIR`) that the first run creates
with `apache-flink` from PyPI (`pyflink_env.py`; ~850 MB, once). Only a missing `java` skips these tests.
"""

from __future__ import annotations

import json
import pickle
import shutil
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pytest

from statekit.savepoint.flink_out import write_flink
from statekit.savepoint.reader import Savepoint
from statekit.savepoint.writer import SavepointBuilder
from statekit.state.descriptors import StateInfo

from .pyflink_env import APACHE_FLINK, ensure_pyflink_python, venv_dir

pytestmark = pytest.mark.flink

HERE = Path(__file__).parent
FIXTURE = HERE.parent / "fixtures" / "flink" / "pyflink"
JOB = HERE / "pyflink_restore_job.py"
TYPES = {"count": "LONG", "avg": "DOUBLE", "even": "BOOLEAN", "last_kind": "STRING", "small": "INT", "raw": "BYTES",
         "pair": "TUPLE(STRING, LONG)", "last_row": "ROW(kind STRING, value LONG)", "obj": "PICKLED",
         "recent": "LIST(STRING)", "per_kind": "MAP(STRING, LONG)", "sum": "REDUCING(LONG)"}


@pytest.fixture(scope="module")
def pyflink_python() -> str:
    """A python with PyFlink: `STATEKIT_PYFLINK_PYTHON`, or the cached venv (created on first use)."""
    if shutil.which("java") is None:
        pytest.skip("PyFlink needs java on PATH to start its JVM")
    try:
        python, seconds = ensure_pyflink_python(log=lambda line: print(line, file=sys.stderr))
    except (OSError, subprocess.CalledProcessError, RuntimeError) as exc:
        pytest.fail(f"no PyFlink: installing {APACHE_FLINK} into {venv_dir()} failed ({exc}); set "
                    "STATEKIT_PYFLINK_PYTHON to a python with apache-flink installed")
    if seconds is not None:
        print(f"installed {APACHE_FLINK} into {venv_dir()} in {seconds:.0f} s", file=sys.stderr)
    probe = subprocess.run([python, "-c", "import pyflink"], capture_output=True, text=True)
    assert probe.returncode == 0, f"{python} cannot import pyflink: {probe.stderr.strip()[-300:]}"
    return python


def _restore(python: str, savepoint: Path, tmp_path: Path, max_parallelism: int, keys: list[str]) -> tuple[dict, dict]:
    """Run the PyFlink job on `savepoint`; (restored state per key, fired timers per key)."""
    out = tmp_path / "restored.jsonl"
    proc = subprocess.run([python, str(JOB), str(savepoint), str(out), str(max_parallelism), *keys],
                          capture_output=True, text=True, timeout=900, cwd=tmp_path)
    assert proc.returncode == 0 and out.exists(), f"PyFlink job failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}"
    states, timers = {}, {}
    for line in out.read_text("utf-8").splitlines():
        row = json.loads(line)
        if "timer" in row:
            timers.setdefault(row["key"], []).append(row["timer"])
        else:
            states[row.pop("key")] = row
    return states, timers


def _expected() -> dict[str, dict]:
    keys = json.loads((FIXTURE / "expected.json").read_text("utf-8"))["operators"]["counter"]["keys"]
    return {k["key"]: {n: v for n, v in k.items() if n not in ("key", "event_timers")} | {"timers": k["event_timers"]}
            for k in keys}


def _check(states: dict, timers: dict, expected: dict[str, dict], absent: list[str]) -> None:
    for key, want in expected.items():
        want = dict(want)
        assert timers.get(key) == want.pop("timers"), key
        assert states[key] == want, key
    for key in absent:
        assert all(v is None for v in states[key].values()), (key, states[key])
        assert key not in timers


def test_pyflink_savepoint_rekeyed_and_rescaled_restores_in_pyflink(pyflink_python, tmp_path):
    source = Savepoint.open(FIXTURE / "savepoint", pyflink_types={"counter": TYPES})
    others = [m.uid or m.uid_hash for m in source.operators if m.uid != "counter"]  # the new job has other sources
    out = write_flink(source, tmp_path / "sp", remove=others, rekey={"counter": lambda k: "alicia" if k == "alice" else k},
                      max_parallelism=256)
    expected = _expected()
    expected["alicia"] = expected.pop("alice")
    states, timers = _restore(pyflink_python, out, tmp_path, 256, [*expected, "alice"])
    _check(states, timers, expected, absent=["alice"])


def test_bootstrapped_python_state_restores_in_pyflink(pyflink_python, tmp_path):
    """A statekit savepoint of plain columns (a new key, changed values) written in PyFlink's layout."""
    expected = _expected()
    expected["erin"] = dict(expected["bob"], count=1000, last_kind="buy", raw="00ff10", timers=[1_000_500],
                            obj={"key": "erin", "kinds": []})
    expected["bob"]["count"] = 77
    keys = sorted(expected)
    col = {n: [expected[k][n] for k in keys] for n in expected[keys[0]]}
    table = pa.table({
        "key": keys, "count": pa.array(col["count"], pa.int64()), "avg": col["avg"], "even": col["even"],
        "last_kind": col["last_kind"], "small": pa.array(col["small"], pa.int32()),
        "raw": [bytes.fromhex(h) for h in col["raw"]],
        "pair": pa.array([{"f0": p[0], "f1": p[1]} for p in col["pair"]]),
        "last_row": pa.array(col["last_row"], pa.struct([("kind", pa.string()), ("value", pa.int64())])),
        "obj": [pickle.dumps(o) for o in col["obj"]], "recent": col["recent"],
        "per_kind": pa.array([list(m.items()) for m in col["per_kind"]], pa.map_(pa.string(), pa.int64())),
        "sum": pa.array(col["sum"], pa.int64())})
    states = [StateInfo("count", "value", "bigint"), StateInfo("avg", "value", "double"),
              StateInfo("even", "value", "boolean"), StateInfo("last_kind", "value", "string"),
              StateInfo("small", "value", "int"), StateInfo("raw", "value", "binary"),
              StateInfo("pair", "value", "struct<f0:string,f1:bigint>"),
              StateInfo("last_row", "value", "struct<kind:string,value:bigint>"), StateInfo("obj", "value", "binary"),
              StateInfo("recent", "list", "array<string>"), StateInfo("per_kind", "map", "map<string,bigint>"),
              StateInfo("sum", "reducing", "bigint")]
    with SavepointBuilder(tmp_path / "statekit") as b:
        op = b.add_operator("counter", max_parallelism=128, key_type="string", keyed_states=states)
        op.write_keyed(table)
        op.write_timers(pa.table({"key": keys, "timestamp": pa.array([expected[k]["timers"][0] for k in keys], pa.int64()),
                                  "domain": ["event"] * len(keys)}))
    # pair is a TUPLE, obj PICKLED (pickle bytes written as they are); the rest is inferred from the columns
    out = write_flink(tmp_path / "statekit", tmp_path / "sp", pyflink={"counter": {"pair": "TUPLE(STRING, LONG)",
                                                                                   "obj": "PICKLED"}})
    got_states, got_timers = _restore(pyflink_python, out, tmp_path, 128, [*keys, "zoe"])
    _check(got_states, got_timers, expected, absent=["zoe"])
