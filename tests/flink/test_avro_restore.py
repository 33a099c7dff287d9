"""Avro state written by statekit restores in real Flink 2.3.0 + flink-avro: a repaired value, a max-parallelism change and a round trip through statekit's format.

Each savepoint is read back by `AvroVerify` (tests/fixtures/flink/avro-generator) with Flink's State
Processor API: Flink's own AvroSerializers decode every value, and every state is looked up through
the key group Flink computes from `UserKey.hashCode()`, so a key statekit placed elsewhere reads as absent.
"""

from __future__ import annotations

import copy
import fcntl
import hashlib
import json
import os
import subprocess
import sys
from decimal import Decimal
from pathlib import Path

import pytest

from statekit.savepoint import Savepoint
from statekit.savepoint.convert import convert_to_statekit
from statekit.savepoint.flink_out import write_flink
from statekit.savepoint.patch import SetValue, repair

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "format" / "flink"))
from test_avro_read import AVRO, UID, expected, jsonish  # noqa: E402

pytestmark = pytest.mark.flink

PROJECT = Path(__file__).resolve().parents[1] / "fixtures" / "flink" / "avro-generator"
BUILD = Path(os.environ.get("STATEKIT_FLINKBUILD_AVRO", "~/.cache/statekit/flinkbuild-avro")).expanduser()


@pytest.fixture(scope="module")
def verify():
    """`verify(savepoint, expected_dict, backend)`: AvroVerify's output; fails the test when Flink disagrees."""
    sys.path.insert(0, str(Path(__file__).parent))
    import flink_harness

    why = flink_harness.missing_tools()
    if why:
        pytest.skip(why)
    h = hashlib.sha256()
    for p in sorted([PROJECT / "pom.xml", *(PROJECT / "src").rglob("*")]):
        if p.is_file():
            h.update(str(p.relative_to(PROJECT)).encode() + p.read_bytes())
    BUILD.mkdir(parents=True, exist_ok=True)
    with open(BUILD / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        stamp = BUILD / "sources.sha256"
        if not (stamp.exists() and stamp.read_text() == h.hexdigest() and (BUILD / "classpath.txt").exists()):
            proc = subprocess.run(["mvn", "-q", "-B", "-f", str(PROJECT / "pom.xml"), f"-Dflinkbuild.dir={BUILD}",
                                   "compile"], capture_output=True, text=True)
            assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
            stamp.write_text(h.hexdigest())
    classpath = f"{BUILD / 'target' / 'classes'}:{(BUILD / 'classpath.txt').read_text().strip()}"

    def run(savepoint: Path, exp: dict, backend: str, tmp: Path) -> str:
        (tmp / "expected.json").write_text(json.dumps(exp))
        cmd = ["java", "-Xmx1g", *flink_harness.ADD_OPENS, "-cp", classpath, "statekit.avrofix.AvroVerify",
               str(savepoint), str(tmp / "expected.json"), backend]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        assert proc.returncode == 0, f"Flink disagrees:\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}"
        return proc.stdout

    return run


def test_repaired_avro_value_restores_in_flink(verify, tmp_path):
    src = AVRO / "hashmap-canonical" / "savepoint"
    exp = expected("hashmap-canonical")
    e = exp["operators"][UID]["keys"][4]
    old = Savepoint.open(src).get(UID, e["key"])
    new = dict(old["account"], tier="FREE", balance=Decimal("-9876.50"), nickname=None, tags=["a", "ü"],
               limits={"z": 1, "y": -2}, amount={"long": None, "string": "changed"}, raw=b"\x00\xff")
    convert_to_statekit(src, tmp_path / "sk")
    repair(tmp_path / "sk", tmp_path / "fixed", [SetValue(UID, tuple(e["key"].values()), "account", new)])
    write_flink(tmp_path / "fixed", tmp_path / "flink")
    want = copy.deepcopy(exp)
    want["operators"][UID]["keys"][4]["account"] = jsonish(new)
    assert "OK 10 keys" in verify(tmp_path / "flink", want, "hashmap", tmp_path)


def test_rescaled_and_round_tripped_avro_state_restores_in_flink(verify, tmp_path):
    src = AVRO / "rocksdb-canonical" / "savepoint"
    exp = expected("rocksdb-canonical")
    write_flink(src, tmp_path / "x256", max_parallelism=256)
    assert "OK 10 keys" in verify(tmp_path / "x256", exp, "rocksdb", tmp_path)
    convert_to_statekit(src, tmp_path / "sk")
    write_flink(tmp_path / "sk", tmp_path / "back")
    assert "OK 10 keys" in verify(tmp_path / "back", exp, "hashmap", tmp_path)


def test_avro_state_set_with_the_cli_restores_in_flink(verify, tmp_path):
    """`statekit set` straight on the Flink savepoint, then `statekit convert --to flink`."""
    from typer.testing import CliRunner

    from statekit_cli.app import app

    exp = expected("rocksdb-canonical")
    e = exp["operators"][UID]["keys"][0]
    new = {"kind": "buy", "value": 999, "at": 1704164645123456,
           "meta": {"source": "cli ✓", "flags": [True, False], "day": 19782}}
    runner = CliRunner()
    res = runner.invoke(app, ["set", str(AVRO / "rocksdb-canonical" / "savepoint"), str(tmp_path / "sk"),
                              "--uid", UID, "--key", json.dumps(e["key"]), "--state", "by_kind",
                              "--value", json.dumps({"buy": new}), "--apply"])
    assert res.exit_code == 0, res.output
    res = runner.invoke(app, ["convert", str(tmp_path / "sk"), str(tmp_path / "flink"), "--to", "flink"])
    assert res.exit_code == 0, res.output
    want = copy.deepcopy(exp)
    want["operators"][UID]["keys"][0]["by_kind"] = {"buy": dict(new, meta=dict(new["meta"], day="2024-02-29"))}
    assert "OK 10 keys" in verify(tmp_path / "flink", want, "rocksdb", tmp_path)


def test_avro_keys_rescaled_restore_in_flink(verify, tmp_path):
    """A GenericRecord key and a SpecificRecord key with LocalDate/Instant fields re-placed at max parallelism 256."""
    exp = expected("keys-hashmap-canonical")
    write_flink(AVRO / "keys-hashmap-canonical" / "savepoint", tmp_path / "x256", max_parallelism=256)
    assert "OK 20 keys" in verify(tmp_path / "x256", exp, "hashmap", tmp_path)
