"""The helper process that decodes Spark partitions beside the caller (statekit/savepoint/spark_helper.py): the same
tables as the caller's own decoder, the caller's typed errors, and a read that survives the helper's death."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest
from spark_corpus import CASES, copy_case, copy_with_sst_crcs

from statekit.format.spark.errors import StateChecksumMismatchError, TruncatedStateFileError
from statekit.savepoint import Savepoint, spark_helper

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the helper needs Linux's memfd")


@pytest.fixture
def helper(monkeypatch):
    """A ready helper for reads of any size; closed after the test, and this process's helper state reset."""
    monkeypatch.setattr(spark_helper, "MIN_BYTES", 0)
    monkeypatch.delenv(spark_helper.ENV, raising=False)
    monkeypatch.setattr(spark_helper, "_asked", 1)  # (started by a process's second large read)
    spark_helper.helper()
    h = spark_helper._helper
    assert h is not None and h.ready.wait(60), "the helper did not start"
    decoded: list[int] = []
    real = h.decode

    def counting(request, schema):
        got = real(request, schema)
        if got is not None:
            decoded.append(request["partition"])
        return got
    monkeypatch.setattr(h, "decode", counting)
    h.decoded = decoded
    yield h
    spark_helper._close()
    spark_helper._helper = None
    spark_helper._disabled = False
    spark_helper._asked = 0


def _without_helper(cp, monkeypatch, **kw):
    with monkeypatch.context() as m:
        m.setenv(spark_helper.ENV, "0")
        return Savepoint.open(cp).keyed_table(0, **kw)


@pytest.mark.parametrize("case", [c for c in CASES if not c.startswith(("tws", "join"))])
def test_the_same_table_as_the_callers_decoder(case, tmp_path, helper, monkeypatch):
    cp = copy_with_sst_crcs(case, tmp_path)
    sp = Savepoint.open(cp)
    parts = sp.spark_operator(0).num_partitions
    assert parts >= 2
    got, want = sp.keyed_table(0), _without_helper(cp, monkeypatch)
    assert got.equals(want)
    assert helper.decoded, "the helper decoded no partition"
    assert sorted(got.column("partition_id").unique().to_pylist()) == sorted(
        want.column("partition_id").unique().to_pylist())


def test_a_partition_the_helper_cannot_decode_raises_the_callers_error(tmp_path, helper):
    cp = copy_case("window_agg-hdfs", tmp_path)
    delta = cp / "state/0/0/6.delta"
    delta.write_bytes(delta.read_bytes()[:-25])
    with pytest.raises(StateChecksumMismatchError, match="6.delta"):
        Savepoint.open(cp).keyed_table(0)
    (cp / "state/0/0/6.delta.crc").unlink()
    with pytest.raises(TruncatedStateFileError, match="6.delta"):
        Savepoint.open(cp).keyed_table(0)
    assert spark_helper._helper is helper and not spark_helper._disabled  # (a bad partition is not a dead helper)


def test_a_read_survives_the_helpers_death(tmp_path, helper, monkeypatch):
    cp = copy_with_sst_crcs("agg-rocksdb", tmp_path)
    want = _without_helper(cp, monkeypatch)
    helper.proc.kill()
    helper.proc.wait()
    assert Savepoint.open(cp).keyed_table(0).equals(want)
    assert spark_helper._disabled and spark_helper.helper() is None  # threads from now on
    assert Savepoint.open(cp).keyed_table(0).equals(want)


def test_a_forked_child_forgets_its_parents_helper(helper):
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child reports through its exit status
        os._exit(0 if spark_helper._helper is None else 1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert helper.proc.poll() is None, "the child's exit stopped the parent's helper"


def test_the_helper_exits_with_its_caller(tmp_path):
    """A process starts its helper at its second large read, and exits with it (no orphan left running)."""
    cp = copy_with_sst_crcs("agg-rocksdb", tmp_path)
    code = (
        "import sys\n"
        "from statekit.savepoint import Savepoint, spark_helper\n"
        "spark_helper.MIN_BYTES = 0\n"
        "Savepoint.open(sys.argv[1]).keyed_table(0)\n"
        "assert spark_helper._helper is None  # (a process's first large read starts none)\n"
        "Savepoint.open(sys.argv[1]).keyed_table(0)\n"
        "h = spark_helper._helper\n"
        "assert h is not None and h.ready.wait(60)\n"
        "Savepoint.open(sys.argv[1]).keyed_table(0)\n"
        "print(h.proc.pid)\n"
    )
    env = {k: v for k, v in os.environ.items() if k != spark_helper.ENV}
    out = subprocess.run([sys.executable, "-c", code, str(cp)], capture_output=True, text=True, timeout=120, env=env)
    assert out.returncode == 0, out.stderr
    helper_pid = int(out.stdout.split()[-1])
    for _ in range(50):  # (it sees its socket close as the caller exits)
        try:
            os.kill(helper_pid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.1)
    else:
        pytest.fail(f"the helper {helper_pid} outlived its caller")
