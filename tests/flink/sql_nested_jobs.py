"""A SQL job whose accumulator row holds structured accumulators of MIN/MAX over retractions (ROW<max, mapSize, map
RAW>, the values in MapView states ``agg<i>$map``), for the nested-field write check (`test_sql_nested_restore`):
MAX/MIN/COUNT of ``amount`` per device over each user's last order (a keep-last deduplication, so the aggregate
sees retractions), on the corpus orders of batch 1, savepointed once the sinks received `ROWS` rows.

Regenerate the committed fixture (tests/fixtures/flink/sql/nested-retract-minmax, ~40 KB) with
``STATEKIT_FLINKBUILD=... .venv/bin/python tests/flink/sql_nested_jobs.py``.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import sql_migrate_jobs as J

FIXTURE = Path(__file__).resolve().parent.parent / "fixtures" / "flink" / "sql" / "nested-retract-minmax"
SINKS = {"dev_out": "device BIGINT, top BIGINT, low BIGINT, cnt BIGINT"}
INSERT = ("INSERT INTO dev_out SELECT device, MAX(amount), MIN(amount), COUNT(*) FROM (SELECT device, amount FROM "
          "(SELECT *, ROW_NUMBER() OVER (PARTITION BY user_id ORDER BY pt DESC) AS rn FROM orders) WHERE rn = 1) "
          "GROUP BY device")
ROWS = 40


def make_fixture(dest: Path = FIXTURE) -> None:
    work = Path(os.environ.get("TMPDIR", "/tmp")) / "statekit-sql-nested-make"
    shutil.rmtree(work, ignore_errors=True)
    J.run([{"action": "make", "sinks": SINKS, "inserts": [INSERT], "min_rows": ROWS, "out": str(work / "out")}],
          work / "jvm")
    shutil.rmtree(dest, ignore_errors=True)
    shutil.copytree(work / "out", dest)
    for p in dest.rglob("*"):
        p.chmod(0o755 if p.is_dir() else 0o644)


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    make_fixture()
