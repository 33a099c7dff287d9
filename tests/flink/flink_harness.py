"""Real Apache Flink 2.3.0 for tests and benchmarks: builds tests/flink/java once, restores savepoints
into a Java job and reads them with Flink's SavepointReader, returning what Flink saw as Python data."""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

JAVA_DIR = Path(__file__).resolve().parent / "java"
# Build output stays outside the repository; rebuilt only when the Maven sources change.
BUILD_DIR = Path(os.environ.get("STATEKIT_FLINKBUILD", "~/.cache/statekit/flinkbuild")).expanduser()
ADD_OPENS = [f"--add-opens=java.base/{p}=ALL-UNNAMED" for p in ("java.lang", "java.util", "java.lang.invoke", "java.nio")]


class FlinkRunError(RuntimeError):
    """A harness JVM failed; the message carries Flink's cause chain."""


def missing_tools() -> str | None:
    """Why real-Flink runs are impossible here (no JDK or no Maven), or None."""
    absent = [tool for tool in ("java", "mvn") if shutil.which(tool) is None]
    if absent:
        return f"real-Flink tests need {' and '.join(absent)} on PATH (a JDK 17 and Maven); not found"
    return None


def _sources_digest() -> str:
    h = hashlib.sha256()
    for p in sorted([JAVA_DIR / "pom.xml", *(JAVA_DIR / "src").rglob("*")]):
        if p.is_file():
            h.update(str(p.relative_to(JAVA_DIR)).encode())
            h.update(p.read_bytes())
    return h.hexdigest()


def build() -> Path:
    """Compile the harness (Flink 2.3.0 from Maven Central via ~/.m2) unless it is up to date."""
    digest = _sources_digest()
    stamp = BUILD_DIR / "sources.sha256"
    BUILD_DIR.mkdir(parents=True, exist_ok=True)
    with open(BUILD_DIR / ".lock", "w") as lock:  # one build at a time across processes
        fcntl.flock(lock, fcntl.LOCK_EX)
        if stamp.exists() and stamp.read_text() == digest and (BUILD_DIR / "classpath.txt").exists():
            return BUILD_DIR
        proc = subprocess.run(
            ["mvn", "-q", "-B", "-f", str(JAVA_DIR / "pom.xml"), f"-Dflinkbuild.dir={BUILD_DIR}", "compile"],
            capture_output=True, text=True,
        )
        if proc.returncode != 0:
            raise FlinkRunError(f"mvn compile of {JAVA_DIR} failed:\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}")
        stamp.write_text(digest)
    return BUILD_DIR


def java_command(main_class: str, *args: str, heap: str = "2g") -> list[str]:
    """The java command line running `main_class` of the built harness."""
    classpath = f"{BUILD_DIR / 'target' / 'classes'}:{(BUILD_DIR / 'classpath.txt').read_text().strip()}"
    return ["java", f"-Xmx{heap}", *ADD_OPENS, "-cp", classpath, main_class, *args]


def _run_pairs(main_class: str, pairs: list[tuple[Path, dict]], timeout: float) -> list[list[dict] | str]:
    """Run one harness class over (savepoint, spec) pairs in one JVM: per pair its records or its error."""
    build()
    with tempfile.TemporaryDirectory(prefix="statekit-flink-") as tmp:
        args: list[str] = []
        for i, (savepoint, spec) in enumerate(pairs):
            spec_file = Path(tmp) / f"spec-{i}.json"
            spec_file.write_text(json.dumps(spec))
            args += [str(Path(savepoint).resolve()), str(spec_file)]
        proc = subprocess.run(java_command(main_class, *args), capture_output=True, text=True, timeout=timeout)
    results: list[list[dict] | str | None] = [None] * len(pairs)
    current: int | None = None
    for line in proc.stdout.splitlines():
        if line.startswith("BEGIN "):
            current = int(line.split()[1])
            results[current] = []
        elif line.startswith("END "):
            current = None
        elif line.startswith("ERROR "):
            _, idx, text = line.split(" ", 2)
            results[int(idx)] = json.loads(text)
            current = None
        elif line.startswith("STATE ") and current is not None:
            results[current].append(json.loads(line[6:]))
    if any(r is None for r in results):
        raise FlinkRunError(f"{main_class} exited with {proc.returncode}:\n{proc.stderr[-6000:]}")
    return results


def _one(results: list[list[dict] | str]) -> list[dict]:
    (r,) = results
    if isinstance(r, str):
        raise FlinkRunError(r)
    return r


def _key(value: Any) -> Any:
    """A JSON value as a hashable dict key (lists and objects by their JSON text)."""
    return json.dumps(value, sort_keys=True) if isinstance(value, (list, dict)) else value


@dataclass
class Restored:
    """What a real Flink job saw after restoring a savepoint."""

    keyed: dict[str, dict[Any, dict[str, Any]]] = field(default_factory=dict)  # op -> key -> state -> value
    subtask_of: dict[str, dict[Any, int]] = field(default_factory=dict)  # op -> key -> subtask that holds it
    timers: dict[str, dict[Any, list[tuple[str, int]]]] = field(default_factory=dict)  # op -> key -> fired
    operator: dict[str, dict[str, dict[int, list]]] = field(default_factory=dict)  # op -> state -> subtask -> values
    broadcast: dict[str, dict[str, dict[int, dict]]] = field(default_factory=dict)  # op -> state -> subtask -> map


def _restored(records: list[dict]) -> Restored:
    out = Restored()
    for r in records:
        op = r["op"]
        if "timer" in r:
            out.timers.setdefault(op, {}).setdefault(_key(r["key"]), []).append((r["domain"], r["timer"]))
        elif "entries" in r:
            out.broadcast.setdefault(op, {}).setdefault(r["state"], {})[r["subtask"]] = r["entries"]
        elif "values" in r:
            out.operator.setdefault(op, {}).setdefault(r["state"], {})[r["subtask"]] = r["values"]
        else:
            key = _key(r["key"])
            if r["value"] is not None:
                out.keyed.setdefault(op, {}).setdefault(key, {})[r["state"]] = r["value"]
            out.subtask_of.setdefault(op, {})[key] = r["subtask"]
    return out


def restore(savepoint: str | Path, spec: dict, *, timeout: float = 900) -> Restored:
    """Restore `savepoint` into a Java job built from `spec` (see Restore.java) and collect its output."""
    return _restored(_one(_run_pairs("statekit.flinktest.Restore", [(Path(savepoint), spec)], timeout)))


def restore_many(pairs: list[tuple[str | Path, dict]], *, timeout: float = 1800) -> list[Restored | str]:
    """Several restores in one JVM: per pair what the job saw, or the job's failure text."""
    results = _run_pairs("statekit.flinktest.Restore", [(Path(s), spec) for s, spec in pairs], timeout)
    return [r if isinstance(r, str) else _restored(r) for r in results]


@dataclass
class Dumped:
    """A savepoint as Flink's SavepointReader and SavepointLoader read it."""

    meta: dict
    keyed: dict[str, dict[Any, dict]] = field(default_factory=dict)  # op -> key -> {states, timers}
    lists: dict[str, dict[str, list]] = field(default_factory=dict)  # op -> state -> values (sorted)
    broadcast: dict[str, dict[str, dict]] = field(default_factory=dict)  # op -> state -> {key: value}
    duplicate_keys: list = field(default_factory=list)

    def operator(self, op_id: str) -> dict:
        return next(o for o in self.meta["operators"] if o["id"] == op_id)


def _dumped(records: list[dict]) -> Dumped:
    out = Dumped(meta=records[0]["meta"])
    for r in records[1:]:
        op = r["op"]
        if "states" in r:
            key = _key(r["key"])
            table = out.keyed.setdefault(op, {})
            if key in table:
                out.duplicate_keys.append((op, r["key"]))
            table[key] = {"states": r["states"], "event_timers": r["event_timers"],
                          "processing_timers": r["processing_timers"]}
        elif r["mode"] == "broadcast":
            out.broadcast.setdefault(op, {}).setdefault(r["state"], {})[_key(r["key"])] = r["value"]
        else:
            out.lists.setdefault(op, {}).setdefault(r["state"], []).append(r["value"])
    for states in out.lists.values():
        for values in states.values():
            values.sort(key=json.dumps)
    return out


def dump_many(pairs: list[tuple[str | Path, dict]], *, timeout: float = 1800) -> list[Dumped | str]:
    """Read several savepoints with Flink's SavepointReader in one JVM (see Dump.java)."""
    results = _run_pairs("statekit.flinktest.Dump", [(Path(s), spec) for s, spec in pairs], timeout)
    return [r if isinstance(r, str) else _dumped(r) for r in results]


def dump(savepoint: str | Path, spec: dict, *, timeout: float = 900) -> Dumped:
    """Read `savepoint` with Flink's SavepointReader and SavepointLoader."""
    (result,) = dump_many([(savepoint, spec)], timeout=timeout)
    if isinstance(result, str):
        raise FlinkRunError(result)
    return result
