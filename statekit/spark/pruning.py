"""Key-group pruning inside Spark's own Parquet scan: compiles, loads and installs statekit's Catalyst rule.

Spark's vectorised Parquet reader is several times faster than any Python data source, but it
knows nothing of key groups. ``statekit/spark/java`` holds a small Catalyst rule
(`io.statekit.spark.KeyGroupPruning`) that closes the gap: for a keyed table read through
Spark's Parquet reader it keeps only the files whose key groups a filter on ``key`` can match and
verifies every file it keeps against the manifest (size and CRC-32) before Spark reads it.

The rule is compiled with the JDK's ``javac`` against the running PySpark's jars the first time it
is needed, cached under ``$STATEKIT_CACHE_DIR`` (default ``~/.cache/statekit``) by a digest of the
sources and the Spark version, loaded into the driver JVM with its own class loader and appended
to ``spark.experimental.extraOptimizations``; so it works on any classic (non-Connect) session,
including one the user built. Without a JDK, `install_pruning` reports why and statekit reads
keyed tables through its Python data source instead.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
import threading
import warnings
import zipfile
from pathlib import Path
from typing import Any, Iterable
from urllib.parse import quote

from pyspark.sql import SparkSession

from statekit.format.manifest import FileEntry
from statekit.savepoint import OperatorMetadata, Savepoint

__all__ = [
    "LITERAL_PATHS", "RULE_CLASS", "install_pruning", "pruning_unavailable", "relation_options", "ship_classes",
    "statekit_class",
]  # fmt: skip

JAVA_SOURCES = Path(__file__).resolve().parent / "java"
RULE_CLASS = "io.statekit.spark.KeyGroupPruning"

#: Read option making Spark take file paths literally: without it Hadoop expands ``?*[]{}`` and a
#: backslash in them as a glob (a directory named ``a[1]`` is not found, and a glob over a path
#: component holding ``:`` fails). Spark's `DataSource.GLOB_PATHS_KEY`; catalog tables keep it.
LITERAL_PATHS = {"__globPaths__": "false"}

_lock = threading.Lock()
# id(py4j gateway) -> (gateway, the URLClassLoader holding statekit's classes); the gateway is kept
# so its id cannot be reused by another object.
_loaders: dict[int, tuple[Any, Any]] = {}
# id(java session) -> (session, None once the rule is installed, else why it could not be: one
# warning per session). The session is kept so its id cannot be reused by a later session.
_sessions: dict[int, tuple[Any, str | None]] = {}


def _cache_root() -> Path:
    if os.environ.get("STATEKIT_CACHE_DIR"):
        return Path(os.environ["STATEKIT_CACHE_DIR"])
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "statekit"


def _spark_jars() -> Path:
    import pyspark

    jars = Path(pyspark.__file__).resolve().parent / "jars"
    if not jars.is_dir() and os.environ.get("SPARK_HOME"):
        jars = Path(os.environ["SPARK_HOME"]) / "jars"
    return jars


def _javac() -> str | None:
    java_home = os.environ.get("JAVA_HOME")
    if java_home and (Path(java_home) / "bin" / "javac").exists():
        return str(Path(java_home) / "bin" / "javac")
    return shutil.which("javac")


def compiled_classes(spark_version: str) -> Path:
    """The directory of compiled rule classes for `spark_version`, compiling them once if needed.

    Raises
    ------
    RuntimeError
        No ``javac``, or compilation failed (the message carries javac's output).
    """
    sources = sorted(JAVA_SOURCES.rglob("*.java"))
    digest = hashlib.sha256(spark_version.encode())
    for source in sources:
        digest.update(source.name.encode() + b"\0" + source.read_bytes())
    target = _cache_root() / "jvm" / f"spark-{spark_version}-{digest.hexdigest()[:16]}"
    if (target / "io" / "statekit" / "spark" / "KeyGroupPruning.class").exists():
        return target
    javac = _javac()
    if javac is None:
        raise RuntimeError("no javac on PATH or in $JAVA_HOME (a JDK 17+ is needed, a JRE is not enough)")
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".build-", dir=target.parent))
    try:
        done = subprocess.run(
            [javac, "-nowarn", "-encoding", "UTF-8", "-cp", str(_spark_jars() / "*"), "-d", str(staging),
             *map(str, sources)],
            capture_output=True, text=True, timeout=600,
        )  # fmt: skip
        if done.returncode != 0:
            raise RuntimeError(f"javac failed:\n{done.stderr.strip()[-2000:]}")
        try:
            os.replace(staging, target)  # atomic: a concurrent build either wins or finds ours
        except OSError:
            if not target.exists():
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return target


def statekit_class(spark: SparkSession, name: str) -> Any:
    """Class `name` (of ``statekit/spark/java``) from statekit's class loader in `spark`'s driver JVM (made once per JVM).

    Raises `RuntimeError` when the classes cannot be compiled (see `compiled_classes`).
    """
    gateway = spark.sparkContext._gateway
    jvm = spark._jvm
    if gateway is None or jvm is None:  # a session always has both (Optional only in PySpark's annotations)
        raise RuntimeError("the Spark session has no JVM gateway; is it stopped?")
    entry = _loaders.get(id(gateway))
    if entry is None:
        classes = compiled_classes(spark.version)
        urls = gateway.new_array(jvm.java.net.URL, 1)
        urls[0] = jvm.java.io.File(str(classes)).toURI().toURL()
        entry = _loaders[id(gateway)] = (gateway, jvm.java.net.URLClassLoader(
            urls, spark._jsparkSession.getClass().getClassLoader()))  # fmt: skip
    return entry[1].loadClass(name)


def ship_classes(spark: SparkSession) -> None:
    """Make statekit's classes loadable by `spark`'s executors (a jar added to the context, once).

    Needed for objects of these classes that travel in tasks (the key-group UDF); the optimizer
    rule runs on the driver only.
    """
    classes = compiled_classes(spark.version)
    jar = classes.parent / f"{classes.name}.jar"
    if not jar.exists():
        fd, tmp = tempfile.mkstemp(prefix=".jar-", dir=classes.parent)
        os.close(fd)
        try:
            with zipfile.ZipFile(tmp, "w") as zf:
                for f in sorted(classes.rglob("*.class")):
                    zf.write(f, f.relative_to(classes).as_posix())
            os.replace(tmp, jar)  # atomic: a concurrent writer's jar has the same contents
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
    sc = spark.sparkContext._jsc.sc()
    uri = jar.resolve().as_uri()
    if not any(str(j).endswith("/" + jar.name) for j in _scala_seq(sc.listJars())):
        sc.addJar(uri)


def _scala_seq(seq: Any) -> list[Any]:
    it, out = seq.iterator(), []
    while it.hasNext():
        out.append(it.next())
    return out


def _rule(spark: SparkSession) -> Any:
    """A new rule instance from statekit's class loader in `spark`'s JVM."""
    gateway = spark.sparkContext._gateway
    jvm = spark._jvm
    if gateway is None or jvm is None:  # a session always has both (Optional only in PySpark's annotations)
        raise RuntimeError("the Spark session has no JVM gateway; is it stopped?")
    cls = statekit_class(spark, RULE_CLASS)
    no_types = gateway.new_array(jvm.java.lang.Class, 0)
    return cls.getDeclaredConstructor(no_types).newInstance(gateway.new_array(jvm.java.lang.Object, 0))


def install_pruning(spark: SparkSession) -> bool:
    """Install the key-group pruning rule in `spark` (idempotent); False, with one warning, if it cannot be.

    It cannot be installed without a JDK, on a Spark Connect session, or when Parquet is read
    through Spark's DataSource V2 path (``spark.sql.sources.useV1SourceList`` without
    ``parquet``), which the rule does not see; `pruning_unavailable` gives the reason.
    """
    return pruning_unavailable(spark) is None


def pruning_unavailable(spark: SparkSession) -> str | None:
    """Why the pruning rule is not active in `spark` (installing it if it can be), or None when it is."""
    # No default argument: conf.get(key, default) returns that default, not Spark's, for unset keys.
    v1 = [s.strip().lower() for s in (spark.conf.get("spark.sql.sources.useV1SourceList") or "").split(",")]
    if "parquet" not in v1:
        return "spark.sql.sources.useV1SourceList does not include parquet, so Parquet scans bypass the rule"
    jsession = getattr(spark, "_jsparkSession", None)
    if jsession is None:
        return "Spark Connect sessions cannot load optimizer rules from the client"
    with _lock:
        known = _sessions.get(id(jsession))
        if known is not None:
            return known[1]
        try:
            _rule(spark).install(jsession)  # idempotent in the JVM too (it checks the session's list)
            _sessions[id(jsession)] = (jsession, None)
            return None
        except Exception as exc:  # noqa: BLE001 - any failure means "fall back", and is reported
            reason = f"{type(exc).__name__}: {exc}"
            _sessions[id(jsession)] = (jsession, reason)
            warnings.warn(
                f"statekit could not install its key-group pruning rule ({reason}); keyed tables are read "
                "through statekit's Python data source instead of Spark's Parquet reader (slower scans).",
                RuntimeWarning,
                stacklevel=3,
            )
            return reason


def relation_options(
    sp: Savepoint, meta: OperatorMetadata, files: Iterable[FileEntry], range_limit: int
) -> dict[str, str]:
    """The ``statekit.*`` read options by which the rule recognises and prunes a keyed table."""
    lines = [
        f"{e.key_group_start} {e.key_group_end} {e.bytes} {e.checksum} {quote(e.path, safe='/')}" for e in files
    ]
    return {
        **LITERAL_PATHS,
        "statekit.savepoint": str(Path(sp.path).resolve()),
        "statekit.operator": meta.display_name,
        "statekit.max_parallelism": str(meta.max_parallelism),
        "statekit.range_limit": str(range_limit),
        "statekit.files": "\n".join(lines),
    }
