"""Real Apache Flink for tests and benchmarks, one build per version line (1.18-2.3): builds tests/flink/java,
restores savepoints into a Java job and reads them with Flink's SavepointReader, returning what Flink saw."""

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
# Build output stays outside the repository, one directory per version line; rebuilt only when the
# Maven sources change.
BUILD_ROOT = Path(os.environ.get("STATEKIT_FLINKBUILD", "~/.cache/statekit/flinkbuild")).expanduser()
ADD_OPENS = [f"--add-opens=java.base/{p}=ALL-UNNAMED" for p in ("java.lang", "java.util", "java.lang.invoke", "java.nio")]

#: version line -> (Flink runtime version, State Processor API version) from Maven Central. The SPA
#: artifact is released only for some patch versions of a line, so it is pinned apart.
FLINK_VERSIONS: dict[str, tuple[str, str]] = {
    "1.18": ("1.18.1", "1.18.1"),
    "1.19": ("1.19.3", "1.19.1"),
    "1.20": ("1.20.5", "1.20.0"),
    "2.0": ("2.0.2", "2.0.0"),
    "2.1": ("2.1.3", "2.1.0"),
    "2.2": ("2.2.1", "2.2.0"),
    "2.3": ("2.3.0", "2.3.0"),
}
DEFAULT_VERSION = "2.3"

#: The harness is written against Flink 2.x; a 1.x build compiles a copy with these names replaced (the
#: API moves between the lines; nothing else differs for what the harness uses). Configuration keys
#: renamed in 2.0 are set under both names in the sources instead.
LEGACY_API: tuple[tuple[str, str], ...] = (
    ("org.apache.flink.streaming.api.functions.source.legacy.SourceFunction",
     "org.apache.flink.streaming.api.functions.source.SourceFunction"),
    ("org.apache.flink.state.rocksdb.EmbeddedRocksDBStateBackend",
     "org.apache.flink.contrib.streaming.state.EmbeddedRocksDBStateBackend"),
    ("import org.apache.flink.api.common.functions.OpenContext;", ""),
    # RichFunction.open(OpenContext) does not exist in 1.18, and KeyedStateReaderFunction keeps the
    # abstract open(Configuration) through 1.20
    ("open(OpenContext ", "open(org.apache.flink.configuration.Configuration "),
    (".fromData(", ".fromElements("),
    ("RecoveryClaimMode", "RestoreMode"),
    # metadata before V5 (Flink 2.0) stores no operator uid
    ("os.getOperatorUid()", "java.util.Optional.<String>empty()"),
)

#: Applied after LEGACY_API for Flink 1.18 only: RuntimeContext.getTaskInfo() and the Sink V2
#: DiscardingSink arrived in 1.19.
API_BEFORE_1_19: tuple[tuple[str, str], ...] = (
    (".getTaskInfo()", ""),
    ("org.apache.flink.streaming.api.functions.sink.v2.DiscardingSink",
     "org.apache.flink.streaming.api.functions.sink.DiscardingSink"),
    (".sinkTo(new DiscardingSink<>())", ".addSink(new DiscardingSink<>())"),
    # StateTtlConfig.newBuilder(Duration) arrived in 1.19
    ("StateTtlConfig.newBuilder(java.time.Duration.ofDays(", "StateTtlConfig.newBuilder(org.apache.flink.api.common.time.Time.days("),
)


def _renames(version: str) -> tuple[tuple[str, str], ...]:
    """The (2.x name, older name) replacements a build for line `version` applies to the harness sources."""
    if not version.startswith("1."):
        return ()
    return LEGACY_API + (API_BEFORE_1_19 if version == "1.18" else ())


class FlinkRunError(RuntimeError):
    """A harness JVM failed; the message carries Flink's cause chain."""


def missing_tools() -> str | None:
    """Why real-Flink runs are impossible here (no JDK or no Maven), or None."""
    absent = [tool for tool in ("java", "mvn") if shutil.which(tool) is None]
    if absent:
        return f"real-Flink tests need {' and '.join(absent)} on PATH (a JDK 17 and Maven); not found"
    return None


def build_dir(version: str = DEFAULT_VERSION) -> Path:
    """Where the harness of Flink `version` (a line such as "1.20") is built."""
    if version not in FLINK_VERSIONS:
        raise ValueError(f"unknown Flink version line {version!r}; known: {', '.join(FLINK_VERSIONS)}")
    return BUILD_ROOT / version


def _sources_digest(version: str) -> str:
    h = hashlib.sha256(repr((FLINK_VERSIONS[version], _renames(version))).encode())
    for p in sorted([JAVA_DIR / "pom.xml", *(JAVA_DIR / "src").rglob("*")]):
        if p.is_file():
            h.update(str(p.relative_to(JAVA_DIR)).encode())
            h.update(p.read_bytes())
    return h.hexdigest()


def port_sources(java_root: Path, dest: Path, version: str) -> Path:
    """A copy of the Java sources under `java_root` at `dest` for a build against line `version` (its renames
    applied; also used by the fixture makers); returns `dest`."""
    shutil.rmtree(dest, ignore_errors=True)
    for src in java_root.rglob("*.java"):
        text = src.read_text()
        for new, old in _renames(version):
            text = text.replace(new, old)
        out = dest / src.relative_to(java_root)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(text)
    return dest


def _legacy_sources(dest: Path, version: str) -> Path:
    """A copy of the harness sources for a 1.x build (its renames applied); returns its java root."""
    return port_sources(JAVA_DIR / "src" / "main" / "java", dest / "src-1.x", version)


def build(version: str = DEFAULT_VERSION) -> Path:
    """Compile the harness against Flink `version` (jars from Maven Central via ~/.m2) unless it is up to date."""
    where = build_dir(version)
    digest = _sources_digest(version)
    stamp = where / "sources.sha256"
    where.mkdir(parents=True, exist_ok=True)
    with open(where / ".lock", "w") as lock:  # one build at a time across processes
        fcntl.flock(lock, fcntl.LOCK_EX)
        if stamp.exists() and stamp.read_text() == digest and (where / "classpath.txt").exists():
            return where
        runtime, spa = FLINK_VERSIONS[version]
        sources = _legacy_sources(where, version) if version.startswith("1.") else JAVA_DIR / "src" / "main" / "java"
        shutil.rmtree(where / "target", ignore_errors=True)  # no class of another source tree survives
        proc = subprocess.run(
            ["mvn", "-q", "-B", "-f", str(JAVA_DIR / "pom.xml"), f"-Dflinkbuild.dir={where}",
             f"-Dflink.version={runtime}", f"-Dspa.version={spa}", f"-Dharness.sources={sources}", "compile"],
            capture_output=True, text=True,
        )
        if proc.returncode != 0:
            raise FlinkRunError(f"mvn compile of {JAVA_DIR} for Flink {runtime} failed:\n"
                                f"{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}")
        stamp.write_text(digest)
    return where


def java_command(main_class: str, *args: str, heap: str = "2g", version: str = DEFAULT_VERSION,
                 extra_classpath: tuple[Path, ...] = ()) -> list[str]:
    """The java command line running `main_class` of the harness built for Flink `version`."""
    where = build_dir(version)
    classpath = ":".join([str(where / "target" / "classes"), (where / "classpath.txt").read_text().strip(),
                          *map(str, extra_classpath)])
    return ["java", f"-Xmx{heap}", *ADD_OPENS, "-cp", classpath, main_class, *args]


def flink_version_of(version: str) -> str:
    """The exact Flink runtime version a line's harness runs (e.g. "1.20" -> "1.20.5")."""
    return FLINK_VERSIONS[version][0]


def s3_filesystem_jar(version: str = DEFAULT_VERSION) -> Path:
    """Flink's S3 filesystem (``flink-s3-fs-hadoop`` of the line's runtime version) from Maven Central via ~/.m2."""
    runtime = FLINK_VERSIONS[version][0]
    jar = (Path.home() / ".m2" / "repository" / "org" / "apache" / "flink" / "flink-s3-fs-hadoop" / runtime
           / f"flink-s3-fs-hadoop-{runtime}.jar")
    if not jar.is_file():
        proc = subprocess.run(["mvn", "-q", "-B", "dependency:get", "-Dtransitive=false",
                               f"-Dartifact=org.apache.flink:flink-s3-fs-hadoop:{runtime}"], capture_output=True, text=True)
        if proc.returncode != 0 or not jar.is_file():
            raise FlinkRunError(f"fetching flink-s3-fs-hadoop {runtime} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    return jar


@dataclass(frozen=True)
class S3Access:
    """How the harness's JVM reaches an S3 server: Flink's S3 filesystem on the classpath, the endpoint and region
    in ``STATEKIT_S3_*`` and the credentials in the JVM's ``AWS_*`` environment (S3.java); never on a command line."""

    endpoint: str
    access_key: str = field(repr=False)
    secret_key: str = field(repr=False)
    region: str = "us-east-1"

    def env(self) -> dict[str, str]:
        base = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
        return {**base, "STATEKIT_S3_ENDPOINT": self.endpoint, "STATEKIT_S3_REGION": self.region,
                "AWS_ACCESS_KEY_ID": self.access_key, "AWS_SECRET_ACCESS_KEY": self.secret_key}


def _arg(savepoint: str | Path) -> str:
    return str(savepoint) if "://" in str(savepoint) else str(Path(savepoint).resolve())


def _run_pairs(main_class: str, pairs: list[tuple[Path | str, dict]], timeout: float,
               version: str = DEFAULT_VERSION, s3: S3Access | None = None) -> list[list[dict] | str]:
    """Run one harness class over (savepoint, spec) pairs in one JVM: per pair its records or its error."""
    build(version)
    extra = (s3_filesystem_jar(version),) if s3 is not None else ()
    with tempfile.TemporaryDirectory(prefix="statekit-flink-") as tmp:
        args: list[str] = []
        for i, (savepoint, spec) in enumerate(pairs):
            spec_file = Path(tmp) / f"spec-{i}.json"
            spec_file.write_text(json.dumps(spec))
            args += [_arg(savepoint), str(spec_file)]
        proc = subprocess.run(java_command(main_class, *args, version=version, extra_classpath=extra),
                              capture_output=True, text=True, timeout=timeout, env=s3.env() if s3 else None)
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


def restore(savepoint: str | Path, spec: dict, *, timeout: float = 900, version: str = DEFAULT_VERSION,
            s3: S3Access | None = None) -> Restored:
    """Restore `savepoint` (a directory, or an ``s3://`` URI read by Flink's S3 filesystem with `s3`) into a Java
    job built from `spec` (see Restore.java) and collect its output."""
    return _restored(_one(_run_pairs("statekit.flinktest.Restore", [(savepoint, spec)], timeout, version, s3)))


def run_s3_job(checkpoints: str, savepoints: str, s3: S3Access, *, timeout: float = 900,
               version: str = DEFAULT_VERSION) -> dict[str, str]:
    """Run S3Job.java: a real job checkpointing (retained) and savepointing straight to `checkpoints` /
    `savepoints` (URIs); returns its ``checkpoint`` id, ``savepoint`` URI and ``job`` id."""
    build(version)
    proc = subprocess.run(java_command("statekit.flinktest.S3Job", checkpoints, savepoints, version=version,
                                       extra_classpath=(s3_filesystem_jar(version),)),
                          capture_output=True, text=True, timeout=timeout, env=s3.env())
    out = dict(line.split(" ", 1) for line in proc.stdout.splitlines() if line.startswith(("checkpoint ", "savepoint ", "job ")))
    if proc.returncode != 0 or len(out) != 3:
        raise FlinkRunError(f"S3Job exited with {proc.returncode}:\n{proc.stdout[-3000:]}\n{proc.stderr[-6000:]}")
    return out


def restore_many(pairs: list[tuple[str | Path, dict]], *, timeout: float = 1800,
                 version: str = DEFAULT_VERSION) -> list[Restored | str]:
    """Several restores in one JVM: per pair what the job saw, or the job's failure text."""
    results = _run_pairs("statekit.flinktest.Restore", [(Path(s), spec) for s, spec in pairs], timeout, version)
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


def dump_many(pairs: list[tuple[str | Path, dict]], *, timeout: float = 1800,
              version: str = DEFAULT_VERSION) -> list[Dumped | str]:
    """Read several savepoints with Flink's SavepointReader in one JVM (see Dump.java)."""
    results = _run_pairs("statekit.flinktest.Dump", [(Path(s), spec) for s, spec in pairs], timeout, version)
    return [r if isinstance(r, str) else _dumped(r) for r in results]


def dump(savepoint: str | Path, spec: dict, *, timeout: float = 900, version: str = DEFAULT_VERSION) -> Dumped:
    """Read `savepoint` with Flink's SavepointReader and SavepointLoader."""
    (result,) = dump_many([(savepoint, spec)], timeout=timeout, version=version)
    if isinstance(result, str):
        raise FlinkRunError(result)
    return result
