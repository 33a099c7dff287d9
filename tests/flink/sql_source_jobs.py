"""Two versions of a SQL job over a source that keeps operator state (Flink's `datagen` sequence, read at a fixed
rate), for migrate-sql's source carry: ``old`` counts and sums ids per ``id % 3``; ``new`` adds ``MAX(id)``, so Flink
refuses the old state, and reads the corpus orders in a statement before it, so its datagen source has another
operator id. Each is savepointed mid-way through the sequence (`SqlMigrate.java`'s ``min_rows`` make), the
new one at another point than the old one: its savepoint is the migration's template, whose source offsets are not
the old job's.

Regenerate the committed fixtures (tests/fixtures/flink/sql/migrate-source, ~60 KB) with
``STATEKIT_FLINKBUILD=... .venv/bin/python tests/flink/sql_source_jobs.py [VERSION...]`` (one JVM per version).
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path
from typing import Any

import sql_migrate_jobs as J

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "flink" / "sql" / "migrate-source"
N = 600  # the sequence 1..N, at RATE ids per second over the source's two subtasks
RATE = 200
DDL = [f"CREATE TABLE gen (id BIGINT) WITH ('connector' = 'datagen', 'fields.id.kind' = 'sequence', "
       f"'fields.id.start' = '1', 'fields.id.end' = '{N}', 'rows-per-second' = '{RATE}')"]
VERSIONS: dict[str, tuple[dict[str, str], list[str], int]] = {  # sinks, inserts, sink rows before the savepoint
    "old": ({"agg_out": "g BIGINT, cnt BIGINT, total BIGINT"},
            ["INSERT INTO agg_out SELECT id % 3, COUNT(*), SUM(id) FROM gen GROUP BY id % 3"], 60),
    # a statement over the corpus orders first: the datagen scan gets another ExecNode id, so another operator id
    "new": ({"dev_out": "device BIGINT, cnt BIGINT", "agg_out": "g BIGINT, cnt BIGINT, total BIGINT, top BIGINT"},
            ["INSERT INTO dev_out SELECT device, COUNT(*) FROM orders GROUP BY device",
             "INSERT INTO agg_out SELECT id % 3, COUNT(*), SUM(id), MAX(id) FROM gen GROUP BY id % 3"], 700),
}


def model() -> dict[int, tuple[int, int, int]]:
    """Per group ``id % 3``: (count, sum, max) over the whole sequence."""
    ids = range(1, N + 1)
    return {g: (sum(1 for i in ids if i % 3 == g), sum(i for i in ids if i % 3 == g), max(i for i in ids if i % 3 == g))
            for g in range(3)}


def restore_task(version: str, savepoint: Path) -> dict[str, Any]:
    return {"action": "restore", "savepoint": str(Path(savepoint).resolve()),
            "plan": str((FIXTURES / version / "plan.json").resolve()), "sinks": VERSIONS[version][0], "ddl": DDL}


def make_fixtures(dest: Path = FIXTURES, names: list[str] | None = None) -> None:
    """Regenerate the committed fixtures (`names`: only those versions) with real Flink."""
    work = Path(os.environ.get("TMPDIR", "/tmp")) / "statekit-sql-source-make"
    shutil.rmtree(work, ignore_errors=True)
    names = names or list(VERSIONS)
    for name in names:
        sinks, inserts, rows = VERSIONS[name]  # one JVM each: ExecNode ids come from a JVM-wide counter
        J.run([{"action": "make", "sinks": sinks, "inserts": inserts, "ddl": DDL, "min_rows": rows,
                "out": str(work / name)}], work / f"jvm-{name}")
    for name in names:
        shutil.rmtree(dest / name, ignore_errors=True)
        shutil.copytree(work / name, dest / name)
        for p in (dest / name).rglob("*"):
            p.chmod(0o755 if p.is_dir() else 0o644)


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    make_fixtures(names=sys.argv[1:] or None)
