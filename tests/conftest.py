"""Shared fixtures: one Spark session for the whole test run (starting one takes seconds), size-limited disks."""

from __future__ import annotations

from pathlib import Path

import pytest


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
