"""Shared fixtures: one Spark session for the whole test run (starting one takes seconds), size-limited disks, and
`compat` claims recorded for the README's compatibility table."""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

import pytest

_COMPAT_CLAIMS = pytest.StashKey[list]()
_COMPAT_RECORDS: list = []


def _compat_table():
    """tests/flink/compat_table.py (a script beside the Flink harness, loaded by path)."""
    spec = importlib.util.spec_from_file_location("compat_table", Path(__file__).parent / "flink" / "compat_table.py")
    assert spec is not None and spec.loader is not None
    if "compat_table" not in sys.modules:  # dataclasses look their module up there
        module = importlib.util.module_from_spec(spec)
        sys.modules["compat_table"] = module
        spec.loader.exec_module(module)
    return sys.modules["compat_table"]


@pytest.fixture
def compat(request):
    """``compat("1.20.5", "read", "rocksdb", "native savepoint")``: this test shows that cell of the README's
    compatibility table; with ``STATEKIT_RECORD_COMPAT=1`` its outcome is stored for `tests/flink/compat_table.py`."""
    table = _compat_table()
    claims = request.node.stash.setdefault(_COMPAT_CLAIMS, [])

    def claim(version: str, op: str, backend: str, fmt: str) -> None:
        claims.append(table.Claim(".".join(str(version).split(".")[:2]), op, backend, fmt))

    return claim


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    """Pair a test's outcome with the compatibility cells it claimed."""
    report = yield
    if report.when == "call" and not report.skipped and os.environ.get("STATEKIT_RECORD_COMPAT") == "1":
        for c in item.stash.get(_COMPAT_CLAIMS, []):
            _COMPAT_RECORDS.append((item.nodeid, c, "passed" if report.passed else "failed"))
    return report


def pytest_sessionfinish(session):
    """Store the recorded outcomes (only with STATEKIT_RECORD_COMPAT=1)."""
    if _COMPAT_RECORDS:
        table = _compat_table()
        table.merge([table.Record(t, c.line, c.op, c.backend, c.format, o) for t, c, o in _COMPAT_RECORDS])


@pytest.fixture(scope="session")
def spark():
    """The test run's Spark session (`statekit.spark.spark_session`), stopped at the end."""
    from statekit.spark import spark_session

    session = spark_session(**{"spark.sql.shuffle.partitions": "4"})
    yield session
    session.stop()


@pytest.fixture
def small_disk(tmp_path):
    """``small_disk("20m")``: a real size-limited tmpfs mounted under `tmp_path`, unmounted afterwards.

    Skips the test (saying why) where mounting is not permitted, i.e. when not running as root.
    """
    import shutil
    import subprocess

    mounted: list[Path] = []

    def mount(size: str = "20m") -> Path:
        mnt = tmp_path / f"small-disk-{len(mounted)}"
        mnt.mkdir()
        if shutil.which("mount") is None:
            pytest.skip("no `mount` command: cannot test a full disk on a size-limited tmpfs")
        r = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(mnt)],
                           capture_output=True, text=True)
        if r.returncode:
            pytest.skip(f"mounting a size-limited tmpfs is not permitted here ({r.stderr.strip()}); "
                        "run the suite as root to test full disks")
        mounted.append(mnt)
        return mnt

    yield mount
    for mnt in mounted:
        subprocess.run(["umount", "-l", str(mnt)], check=False)
