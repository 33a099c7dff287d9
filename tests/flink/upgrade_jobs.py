"""The 1.x -> 2.x upgrade pairs: the Scala API job's Maven build (Flink 1.20) and restores into the Java job's 2.x build.

The Java side lives in the harness (tests/flink/java, package statekit.upgrade: UpgradeWrite writes a savepoint,
UpgradeRead restores one and prints every value) and is built per version line by `flink_harness`. The Scala
job (tests/flink/upgrade-scala) has its own Maven project: the 1.x Scala API and scala-maven-plugin.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import flink_harness

SCALA_DIR = Path(__file__).resolve().parent / "upgrade-scala"


def scala_build_dir() -> Path:
    return flink_harness.BUILD_ROOT / "scala-1.20"


def build_scala() -> Path:
    """Compile the Flink 1.20 Scala API job (jars and scala-maven-plugin from Maven Central) unless it is up to date."""
    where = scala_build_dir()
    h = hashlib.sha256()
    for p in sorted([SCALA_DIR / "pom.xml", *(SCALA_DIR / "src").rglob("*")]):
        if p.is_file():
            h.update(str(p.relative_to(SCALA_DIR)).encode() + p.read_bytes())
    where.mkdir(parents=True, exist_ok=True)
    with open(where / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        stamp = where / "sources.sha256"
        if stamp.exists() and stamp.read_text() == h.hexdigest() and (where / "classpath.txt").exists():
            return where
        proc = subprocess.run(["mvn", "-q", "-B", "-f", str(SCALA_DIR / "pom.xml"), f"-Dflinkbuild.dir={where}", "compile"],
                              capture_output=True, text=True)
        if proc.returncode != 0:
            raise flink_harness.FlinkRunError(f"mvn compile of {SCALA_DIR} failed:\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}")
        stamp.write_text(h.hexdigest())
    return where


def scala_command(main_class: str, *args: str) -> list[str]:
    """The java command line running `main_class` of the Scala job."""
    where = scala_build_dir()
    cp = f"{where / 'target' / 'classes'}:{(where / 'classpath.txt').read_text().strip()}"
    return ["java", "-Xmx1g", *flink_harness.ADD_OPENS, "-cp", cp, main_class, *args]


def restore(pairs: list[tuple[str | Path, list[str], str]], *, version: str = "2.3",
            timeout: float = 1200) -> list[dict[str, dict[str, dict[str, Any]]] | str]:
    """Restore each (savepoint, operator uids, state backend) into the job's `version` build, all in one JVM:
    per pair {uid: {key: {state: value}}} as the restored job saw it, or Flink's failure (its cause chain)."""
    flink_harness.build(version)
    with tempfile.TemporaryDirectory(prefix="statekit-upgrade-") as tmp:
        args: list[str] = []
        for i, (sp, uids, backend) in enumerate(pairs):
            spec = Path(tmp) / f"spec-{i}.json"
            spec.write_text(json.dumps({"operators": uids, "state_backend": backend}))
            args += [str(Path(sp).resolve()), str(spec)]
        proc = subprocess.run(flink_harness.java_command("statekit.upgrade.UpgradeRead", *args, version=version),
                              capture_output=True, text=True, timeout=timeout)
    results: list[Any] = [None] * len(pairs)
    current = None
    for line in proc.stdout.splitlines():
        if line.startswith("BEGIN "):
            current = int(line.split()[1])
            results[current] = {}
        elif line.startswith("ERROR "):
            _, i, text = line.split(" ", 2)
            results[int(i)] = json.loads(text)
        elif line.startswith("STATE ") and current is not None:
            r = json.loads(line[6:])
            results[current].setdefault(r["op"], {}).setdefault(r["key"], {})[r["state"]] = r["value"]
    if any(r is None for r in results):
        raise flink_harness.FlinkRunError(f"UpgradeRead exited with {proc.returncode}:\n{proc.stderr[-6000:]}")
    return results
