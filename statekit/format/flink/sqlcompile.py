"""A Flink SQL job's statements compiled to its plan by Flink's own planner (a JDK and Maven needed), cached by the SQL's digest.

Boundary: SQL text in (the job's CREATE/SET statements and its INSERTs, as `--sql job.sql` names
them), the parsed compiled plan out, the same JSON ``COMPILE PLAN ... FOR STATEMENT SET`` writes.
The compiler is ``planner/`` beside this module: one Java class over Flink 2.3.0's planner from
Maven Central, built once with Maven into ``$STATEKIT_CACHE_DIR`` (default ``~/.cache/statekit``)
and run in its own JVM; each SQL text's plan is cached there by a digest of the text and the
compiler. The SQL is only planned, never run: no source is read, no state touched. Connectors
the planner cannot find (a job's Kafka tables, say) make the compile fail with the planner's
message; their jars can be added with ``$STATEKIT_SQL_PLANNER_CLASSPATH``.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

from statekit.errors import InvalidArgumentError, PlannerUnavailableError, SqlCompileError

__all__ = ["FLINK_VERSION", "compile_plan", "compiled_plan_path"]

FLINK_VERSION = "2.3.0"
_SOURCES = Path(__file__).resolve().parent / "planner"
_MAIN = "io.statekit.planner.CompilePlan"
_HOW = ("pass the job's compiled plan with --plan plan.json (plan= in the library) instead: Flink writes it with "
        "COMPILE PLAN 'plan.json' FOR STATEMENT SET BEGIN <the job's INSERTs> END (SQL client) or "
        "TableEnvironment.compilePlanSql / StatementSet.compilePlan().writeToFile(...)")


def _cache_root() -> Path:
    if os.environ.get("STATEKIT_CACHE_DIR"):
        return Path(os.environ["STATEKIT_CACHE_DIR"])
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "statekit"


def _digest() -> str:
    h = hashlib.sha256(FLINK_VERSION.encode())
    for p in sorted(_SOURCES.rglob("*")):
        if p.is_file():
            h.update(p.relative_to(_SOURCES).as_posix().encode() + b"\0" + p.read_bytes())
    return h.hexdigest()[:16]


def _tools() -> tuple[str, str]:
    """(java, mvn) of a JDK 17+ and Maven, or `PlannerUnavailableError` saying what is missing and what to do."""
    java_home = os.environ.get("JAVA_HOME")
    java = str(Path(java_home) / "bin" / "java") if java_home and (Path(java_home) / "bin" / "java").exists() \
        else shutil.which("java")
    mvn = shutil.which("mvn")
    missing = [name for name, p in (("a JDK 17+ (java)", java), ("Maven (mvn)", mvn)) if p is None]
    if not missing and java is not None:
        out = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=60)
        m = re.search(r'version "(\d+)', out.stderr + out.stdout)
        if m is None or int(m.group(1)) < 17:
            missing.append(f"a JDK 17+ (java -version says {(out.stderr or out.stdout).splitlines()[:1]})")
    if missing or java is None or mvn is None:
        raise PlannerUnavailableError(
            f"compiling a SQL job's plan runs Flink {FLINK_VERSION}'s planner, which needs {' and '.join(missing)} "
            f"on PATH; install them, or {_HOW}."
        )
    return java, mvn


def _build(mvn: str) -> tuple[Path, str]:
    """(classes directory, runtime classpath) of the compiler, built once per compiler digest (atomically)."""
    target = _cache_root() / "flink-sql-planner" / f"{FLINK_VERSION}-{_digest()}"
    done = target / "classpath.txt"
    if not done.exists():
        target.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=".build-", dir=target.parent))
        try:
            src = staging / "src"
            shutil.copytree(_SOURCES, src)
            out = subprocess.run([mvn, "-q", "-B", "-f", str(src / "pom.xml"), f"-Dplanner.dir={staging}", "compile"],
                                 capture_output=True, text=True, timeout=1800)
            if out.returncode != 0:
                raise PlannerUnavailableError(
                    f"building statekit's SQL plan compiler with Maven failed (Flink {FLINK_VERSION} from Maven "
                    f"Central; is the network or ~/.m2 reachable?):\n{(out.stdout + out.stderr).strip()[-2000:]}\n"
                    f"Or {_HOW}."
                )
            try:
                os.replace(staging, target)  # atomic: a concurrent build either wins or finds ours
            except OSError:
                if not done.exists():
                    raise
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    return target / "target" / "classes", done.read_text().strip()


def compile_plan(sql: str | os.PathLike[str]) -> dict[str, Any]:
    """The compiled plan (parsed JSON) of a Flink SQL job given as its statements (text, or a path to a ``.sql`` file).

    See `compiled_plan_path` for what is raised.
    """
    return json.loads(compiled_plan_path(sql).read_text("utf-8"))


def compiled_plan_path(sql: str | os.PathLike[str]) -> Path:
    """The cached JSON file of the compiled plan of a Flink SQL job's statements (compiled on first use).

    Raises
    ------
    SqlCompileError
        The planner refuses the SQL (its message is carried), or the SQL has no INSERT.
    PlannerUnavailableError
        No JDK 17+ or Maven to run the planner with (the message says how to pass ``--plan`` instead).
    InvalidArgumentError
        A path that does not exist.
    """
    where = "the SQL text"
    if isinstance(sql, os.PathLike) or (isinstance(sql, str) and "\n" not in sql and sql.strip().endswith(".sql")):
        p = Path(sql)
        if not p.is_file():
            raise InvalidArgumentError(f"SQL file {p} does not exist; pass the job's statements (a .sql file).")
        where, text = str(p), p.read_text("utf-8")
    else:
        text = str(sql)
    key = hashlib.sha256((_digest() + "\0" + text).encode()).hexdigest()[:24]
    cache = _cache_root() / "flink-sql-plans" / f"{key}.json"
    if cache.exists():
        return cache
    java, mvn = _tools()
    classes, classpath = _build(mvn)
    extra = os.environ.get("STATEKIT_SQL_PLANNER_CLASSPATH", "")
    cp = os.pathsep.join(x for x in (str(classes), classpath, extra) if x)
    with tempfile.TemporaryDirectory(prefix="statekit-sql-plan-") as tmp:  # the JVM's own temp files go here
        out = subprocess.run([java, "-Xmx1g", f"-Djava.io.tmpdir={tmp}", "-cp", cp, _MAIN], input=text.encode("utf-8"),
                             capture_output=True, timeout=900)
    if out.returncode != 0:
        msg = out.stderr.decode("utf-8", "replace").strip()
        lines = [x for x in msg.splitlines() if not x.startswith(("SLF4J", "WARNING"))]
        raise SqlCompileError(f"{where} does not compile with Flink {FLINK_VERSION}'s planner: "
                              f"{chr(10).join(lines)[-3000:]}\nFix the statement it names, or {_HOW}.")
    plan = out.stdout.decode("utf-8")
    json.loads(plan)  # the planner's output is JSON, or nothing is cached
    cache.parent.mkdir(parents=True, exist_ok=True)
    tmp_file = cache.with_suffix(f".{os.getpid()}.tmp")
    tmp_file.write_text(plan, "utf-8")
    os.replace(tmp_file, cache)
    return cache
