"""Real Flink 2.3.0 restores of SQL savepoints into the SQL corpus job (`../shared/flink/sql/generator`), the
restore check of the SQL write tests: `SqlRestore.java` is built inside a private copy of the generator (never in
the shared one), once per build directory, and restores every task of one call in one JVM."""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
GENERATOR = Path(os.environ.get("STATEKIT_FLINK_SQL_GENERATOR") or REPO.parent / "shared" / "flink" / "sql" / "generator")
BUILD_ROOT = Path(os.environ.get("STATEKIT_FLINKBUILD", "~/.cache/statekit/flinkbuild")).expanduser()
WORK = BUILD_ROOT.parent / (BUILD_ROOT.name + "-sql-restore")
SOURCES = sorted((HERE / "sql").glob("*.java"))


def missing_tools() -> str | None:
    """Why real-Flink restores are impossible here (no JDK or no Maven), or None."""
    absent = [tool for tool in ("java", "mvn") if shutil.which(tool) is None]
    return f"the SQL restore check needs {' and '.join(absent)} on PATH (a JDK 17 and Maven)" if absent else None


def generator() -> Path:
    """The private generator copy with the restore check added (rebuilt when a source changed)."""
    dst = WORK / "generator"
    if not (dst / "pom.xml").exists():
        shutil.rmtree(dst, ignore_errors=True)
        shutil.copytree(GENERATOR, dst, ignore=shutil.ignore_patterns("target"))
        for p in dst.rglob("*"):
            p.chmod(0o755 if p.is_dir() or p.suffix == ".sh" else 0o644)
    for src in SOURCES:
        target = dst / "src" / "main" / "java" / "statekit" / "flinksql" / src.name
        if not target.exists() or target.read_bytes() != src.read_bytes():
            shutil.copyfile(src, target)
            (WORK / "build" / "classpath.txt").unlink(missing_ok=True)  # run.sh compiles again
    return dst


def build() -> Path:
    """Compile the private copy once (a lock keeps concurrent sessions from building it twice)."""
    WORK.mkdir(parents=True, exist_ok=True)
    with open(WORK / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        gen = generator()
        if not (WORK / "build" / "classpath.txt").exists():
            out = subprocess.run(["mvn", "-q", "-B", "-f", str(gen / "pom.xml"), f"-Dflinkbuild.dir={WORK / 'build'}",
                                  "compile"], capture_output=True, text=True)
            if out.returncode:
                raise RuntimeError(f"building the SQL restore check failed:\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}")
    return gen


@dataclass
class Restored:
    """One restore: the sinks' batch-2 changelog and the model's results (batch 1, both batches, batch 2 alone)."""

    changelog: dict[str, list[str]]
    results1: dict[str, list[str]]
    results_all: dict[str, list[str]]
    results2: dict[str, list[str]]
    orders2: list[list[Any]]
    missing: dict[str, list[str]] = field(default_factory=dict)

    def final(self) -> dict[str, list[str]]:
        """Batch 1's results with batch 2's changelog applied (retractions of rows not there go to `missing`)."""
        out = {}
        for sink, rows in self.results1.items():
            table = list(rows)
            for change in self.changelog.get(sink, []):
                row = change[2:]
                if change.startswith("+"):
                    table.append(row)
                elif row in table:
                    table.remove(row)
                else:
                    self.missing.setdefault(sink, []).append(change)
            out[sink] = sorted(table)
        return out


def restore(tasks: list[dict[str, Any]], work: Path) -> list[Restored]:
    """Restore each task (``savepoint``, ``mode`` default|plan, ``ttl`` or None, ``plan``: the compiled plan file
    a plan-mode job runs from) in one JVM; a failed restore raises with Flink's cause chain."""
    gen = build()
    work.mkdir(parents=True, exist_ok=True)
    spec = []
    for i, t in enumerate(tasks):
        plan = t.get("plan")
        spec.append({"savepoint": str(Path(t["savepoint"]).resolve()), "mode": t["mode"], "ttl": t.get("ttl"),
                     "plan": str(Path(plan).resolve()) if plan else None, "out": str(work / f"restore-{i}.json")})
    (work / "tasks.json").write_text(json.dumps(spec))
    env = dict(os.environ, FLINKBUILD_DIR=str(WORK / "build"), SKIP_BUILD="1", JAVA_OPTS="-Xmx1g")
    out = subprocess.run(["bash", str(gen / "run.sh"), "SqlRestore", str(work / "tasks.json")], env=env,
                         capture_output=True, text=True)
    if out.returncode:
        raise RuntimeError(f"SqlRestore failed:\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}")
    results = []
    for s in spec:
        r = json.loads(Path(s["out"]).read_text())
        if "error" in r:
            raise RuntimeError(f"Flink did not restore {s['savepoint']}:\n{r['error']}")
        results.append(Restored(r["changelog"], r["results1"], r["results_all"], r["results2"], r["orders2"]))
    return results


def template(out: Path, mode: str, plan: Path | None = None) -> Path:
    """A bootstrap template of the corpus job at `out`: the job (``mode`` default|plan, from `plan` in plan mode)
    run with sources that emit nothing, and a canonical savepoint of it (`SqlTemplate.java`)."""
    gen = build()
    env = dict(os.environ, FLINKBUILD_DIR=str(WORK / "build"), SKIP_BUILD="1", JAVA_OPTS="-Xmx1g")
    args = ["bash", str(gen / "run.sh"), "SqlTemplate", str(Path(out).resolve()), mode]
    if plan is not None:
        args.append(str(Path(plan).resolve()))
    done = subprocess.run(args, env=env, capture_output=True, text=True)
    if done.returncode or not (Path(out) / "_metadata").exists():
        raise RuntimeError(f"SqlTemplate failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    return Path(out)


#: the corpus model's users (`Model.java`)
NAMES = ["alice", "bob", "carol", "dave", "erin", "frank", "grace", "heidi", "jürgen", "日本", "bartholomew", "日本語ユーザー"]
IDS = [1, 2, 3, 42, 1000, -1, -42, 123456789012, 2**63 - 1, -(2**63), 7, 0]


def orders1() -> Any:
    """Batch 1 of the corpus model's ``orders`` (`Model.orders1`), as a pyarrow table with the table's columns."""
    import pyarrow as pa

    rows = []
    for i in range(72):
        u = (i * 7) % 12 if i < 60 else i % 4
        rows.append({"order_id": 1000 + i, "user_name": None if i == 33 else NAMES[u], "user_id": IDS[u],
                     "device": 1 + (i // 5) % 2, "kind": None if i % 17 == 5 else ["click", "view", "buy"][(i + u) % 3],
                     "amount": None if u == 10 else (i * 37) % 101,
                     "ts": 1_704_067_200_000 + i * 700 - (900 if i % 4 == 3 else 0)})
    t = pa.Table.from_pylist(rows)
    return t.set_column(t.schema.get_field_index("ts"), "ts", t.column("ts").cast(pa.timestamp("ms", "UTC")))
