"""SQL jobs with nested values in their state, for the nested-field write check (`test_sql_nested_restore`), on the
corpus orders of batch 1, savepointed once the sinks received `ROWS` rows (`SqlMigrate.java`'s ``min_rows`` make):

- ``minmax``: structured accumulators of MIN/MAX over retractions (ROW<max, mapSize, map RAW>, the values in MapView
  states ``agg<i>$map``): MAX/MIN/COUNT of ``amount`` per device over each user's last order (a keep-last
  deduplication, so the aggregate sees retractions);
- ``dedup``: a keep-last deduplication whose stored rows hold an ARRAY, a MAP and a ROW with an ARRAY, with NULL
  elements and values.

Regenerate the committed fixtures (tests/fixtures/flink/sql/nested-*, ~80 KB each) with
``STATEKIT_FLINKBUILD=... .venv/bin/python tests/flink/sql_nested_jobs.py [JOB...]``.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import sql_migrate_jobs as J

HERE = Path(__file__).resolve().parent
#: job -> (fixture, sinks, INSERT)
JOBS = {
    "minmax": (HERE.parent / "fixtures" / "flink" / "sql" / "nested-retract-minmax",
               {"dev_out": "device BIGINT, top BIGINT, low BIGINT, cnt BIGINT"},
               "INSERT INTO dev_out SELECT device, MAX(amount), MIN(amount), COUNT(*) FROM (SELECT device, amount FROM "
               "(SELECT *, ROW_NUMBER() OVER (PARTITION BY user_id ORDER BY pt DESC) AS rn FROM orders) WHERE rn = 1) "
               "GROUP BY device"),
    "dedup": (HERE.parent / "fixtures" / "flink" / "sql" / "nested-dedup",
              # the ARRAY leaves as a string (the sink prints a top-level array as a Java object identity); it is
              # stored as an ARRAY in the deduplication's rows: the cast comes after it
              {"nest_out": "user_id BIGINT, arr STRING, m MAP<STRING, BIGINT>, r ROW<name STRING, ids ARRAY<BIGINT>>"},
              "INSERT INTO nest_out SELECT user_id, CAST(arr AS STRING), m, r FROM (SELECT user_id, ARRAY[amount, device] AS arr, "
              "MAP['a', amount, 'd', device] AS m, ROW(user_name, ARRAY[order_id, CAST(NULL AS BIGINT)]) AS r, "
              "ROW_NUMBER() OVER (PARTITION BY user_id ORDER BY pt DESC) AS rn FROM orders) WHERE rn = 1"),
}
FIXTURE, SINKS, _ = JOBS["minmax"]
ROWS = 40


def make_fixtures(names: list[str] | None = None) -> None:
    """Regenerate the committed fixtures (`names`: only those jobs) with real Flink, one JVM each."""
    work = Path(os.environ.get("TMPDIR", "/tmp")) / "statekit-sql-nested-make"
    shutil.rmtree(work, ignore_errors=True)
    for name in names or list(JOBS):
        dest, sinks, insert = JOBS[name]
        J.run([{"action": "make", "sinks": sinks, "inserts": [insert], "min_rows": ROWS, "out": str(work / name)}],
              work / f"jvm-{name}")
        shutil.rmtree(dest, ignore_errors=True)
        shutil.copytree(work / name, dest)
        for p in dest.rglob("*"):
            p.chmod(0o755 if p.is_dir() else 0o644)


if __name__ == "__main__":
    sys.path.insert(0, str(HERE))
    make_fixtures(sys.argv[1:] or None)
