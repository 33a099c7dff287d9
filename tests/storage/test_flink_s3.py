"""Real Flink 2.3.0 with the S3 server: a Flink savepoint statekit wrote to the server restores into the real job of
the `flink` suite reading it from the server, and a real job's savepoint and retained checkpoint, written straight
to the server, read exactly there (Flink's S3 filesystem, `flink-s3-fs-hadoop` of the same version from Maven
Central, on the job's classpath; path-style access; credentials only in the JVM's environment)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from statekit.format.storage import locate
from statekit.savepoint import Savepoint
from statekit.savepoint.flink_out import write_flink

from ..flink.test_repair_restore import CASE, _expected_counter, _spec

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "flink"))

import flink_harness  # noqa: E402

pytestmark = pytest.mark.flink


@pytest.fixture(scope="module")
def flink():
    why = flink_harness.missing_tools()
    if why:
        pytest.skip(why)
    flink_harness.build()
    return flink_harness


def _access(s3_server) -> flink_harness.S3Access:
    opts = s3_server.options()
    return flink_harness.S3Access(opts["endpoint_url"], opts["access_key"], opts["secret_key"], opts["region"])


def test_savepoint_statekit_wrote_to_s3_restores_into_real_flink_from_s3(flink, s3_server, s3_prefix):
    """The corpus savepoint, renamed and re-keyed by statekit straight to the server, restored by Flink from there."""
    opts = s3_server.options()
    target = locate(f"{s3_prefix}/renamed", storage_options=opts)
    write_flink(CASE / "savepoint", target, uids={"counter": "counter-v2"}, rekey={"counter": lambda k: f"k{k}"},
                key_types={"counter": "string"})
    got = flink.restore(str(target), _spec(job_max=None, counter_max=None, counter_uid="counter-v2",
                                           counter_key="string"), s3=_access(s3_server))
    values, timers = _expected_counter(lambda k: f"k{k}")
    assert got.keyed["counter-v2"] == values
    assert got.timers["counter-v2"] == timers
    assert all(v == {"max": 500, "min": 5, "threshold": 43} for v in got.broadcast["rules"]["rules"].values())


def test_real_flink_writes_savepoint_and_retained_checkpoint_to_s3(flink, s3_server, s3_prefix):
    """S3Job.java checkpoints (retained) and savepoints to s3://; statekit reads both on the server exactly."""
    opts = s3_server.options()
    out = flink.run_s3_job(f"{s3_prefix}/checkpoints", f"{s3_prefix}/savepoints", _access(s3_server))
    want = {k: 3 for k in range(500)}  # S3Job: keys 0..499 counted 3 times each
    sp = Savepoint.open(out["savepoint"], storage_options=opts)
    assert str(sp.path).startswith(f"{s3_prefix}/savepoints/")
    table = sp.keyed_table("counter")
    assert dict(zip(table.column("key").to_pylist(), table.column("count").to_pylist())) == want
    chk = f"{s3_prefix}/checkpoints/{out['job']}/chk-{out['checkpoint']}"
    metadata = locate(f"{chk}/_metadata", storage_options=opts).read_bytes()
    assert f"{s3_prefix}/checkpoints/{out['job']}/".encode() in metadata  # absolute s3:// handles
    cp = Savepoint.open(chk, storage_options=opts)
    assert cp.kind == "checkpoint"
    table = cp.keyed_table("counter")
    assert dict(zip(table.column("key").to_pylist(), table.column("count").to_pylist())) == want
