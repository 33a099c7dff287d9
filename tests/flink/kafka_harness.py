"""A real Apache Kafka broker (KRaft mode, from the Kafka jars on Maven Central) and a real Flink 2.3.0 job with
`flink-connector-kafka`, for the source-offsets tests: start the broker on 127.0.0.1, create and fill a topic, run
the job (from the earliest offsets or restored from a savepoint), take a savepoint of the running job.

The two Maven projects under tests/flink/kafka (`broker`: only a classpath; `job`: the job and a topic tool) are
built outside the repository, in ``$STATEKIT_FLINKBUILD/kafka`` (default ``~/.cache/statekit/flinkbuild/kafka``),
again only when their sources change.
"""

from __future__ import annotations

import base64
import fcntl
import hashlib
import shutil
import socket
import subprocess
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from flink_harness import ADD_OPENS, BUILD_ROOT, FlinkRunError

KAFKA_DIR = Path(__file__).resolve().parent / "kafka"
BUILD = BUILD_ROOT / "kafka"


def _digest() -> str:
    h = hashlib.sha256()
    for p in sorted(KAFKA_DIR.rglob("*")):
        if p.is_file():
            h.update(str(p.relative_to(KAFKA_DIR)).encode())
            h.update(p.read_bytes())
    return h.hexdigest()


def build() -> Path:
    """Resolve the broker's classpath and compile the job (jars from Maven Central via ~/.m2) unless up to date."""
    BUILD.mkdir(parents=True, exist_ok=True)
    stamp = BUILD / "sources.sha256"
    digest = _digest()
    with open(BUILD / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if stamp.exists() and stamp.read_text() == digest and (BUILD / "job-classpath.txt").exists() \
                and (BUILD / "broker-classpath.txt").exists():
            return BUILD
        shutil.rmtree(BUILD / "target", ignore_errors=True)
        for pom, goal in (("broker", "generate-resources"), ("job", "compile")):
            proc = subprocess.run(["mvn", "-q", "-B", "-f", str(KAFKA_DIR / pom / "pom.xml"),
                                   f"-Dkafkabuild.dir={BUILD}", goal], capture_output=True, text=True)
            if proc.returncode != 0:
                raise FlinkRunError(f"mvn {goal} of {KAFKA_DIR / pom} failed:\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}")
        stamp.write_text(digest)
    return BUILD


def _classpath(which: str) -> str:
    cp = (BUILD / f"{which}-classpath.txt").read_text().strip()
    return f"{BUILD / 'target' / 'classes'}:{cp}" if which == "job" else cp


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


_LOG4J = """rootLogger.level = WARN
rootLogger.appenderRef.file.ref = File
appender.file.name = File
appender.file.type = File
appender.file.fileName = {log}
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = %d{{HH:mm:ss}} %-5p %c{{1}} - %m%n
logger.kafka.name = kafka.server.KafkaRaftServer
logger.kafka.level = INFO
"""


class Broker:
    """One KRaft broker+controller on 127.0.0.1 with its own data directory; `stop()` ends the process it started."""

    def __init__(self, workdir: Path) -> None:
        build()
        self.dir = workdir
        self.port = _free_port()
        controller = _free_port()
        self.bootstrap = f"127.0.0.1:{self.port}"
        props = self.dir / "server.properties"
        (self.dir / "data").mkdir(parents=True)
        props.write_text("\n".join([
            "process.roles=broker,controller",
            "node.id=1",
            f"controller.quorum.voters=1@127.0.0.1:{controller}",
            f"listeners=PLAINTEXT://127.0.0.1:{self.port},CONTROLLER://127.0.0.1:{controller}",
            f"advertised.listeners=PLAINTEXT://127.0.0.1:{self.port}",
            "controller.listener.names=CONTROLLER",
            "listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
            "inter.broker.listener.name=PLAINTEXT",
            f"log.dirs={self.dir / 'data'}",
            "num.partitions=1",
            "offsets.topic.replication.factor=1",
            "offsets.topic.num.partitions=1",
            "transaction.state.log.replication.factor=1",
            "transaction.state.log.min.isr=1",
            "group.initial.rebalance.delay.ms=0",
            "", ]))
        self.log = self.dir / "broker.log"
        log4j = self.dir / "log4j2.properties"
        log4j.write_text(_LOG4J.format(log=self.log))
        java = ["java", "-Xmx512m", "-XX:+UseSerialGC", f"-Dlog4j2.configurationFile={log4j}",
                "-cp", _classpath("broker")]
        cluster_id = "-"
        while cluster_id.startswith("-"):  # the tool's argument parser would take a leading '-' for an option
            cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        proc = subprocess.run([*java, "kafka.tools.StorageTool", "format", "-t", cluster_id, "-c", str(props)],
                              capture_output=True, text=True, timeout=120)
        if proc.returncode != 0:
            raise FlinkRunError(f"formatting the Kafka storage failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
        self._out = open(self.dir / "broker.out", "wb")
        self.proc = subprocess.Popen([*java, "kafka.Kafka", str(props)], stdout=self._out, stderr=subprocess.STDOUT)
        self._wait_ready()

    def _wait_ready(self, timeout: float = 90) -> None:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if self.proc.poll() is not None:
                raise FlinkRunError(f"the Kafka broker exited with {self.proc.returncode}:\n{self._tail()}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1):
                    return
            except OSError:
                time.sleep(0.2)
        self.stop()
        raise FlinkRunError(f"the Kafka broker did not listen on {self.bootstrap} within {timeout} s:\n{self._tail()}")

    def _tail(self) -> str:
        text = ""
        for p in (self.dir / "broker.out", self.log):
            if p.exists():
                text += p.read_text(errors="replace")[-3000:]
        return text

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._out.close()

    def produce(self, topic: str, partitions: int, counts: dict[int, Count], prefix: str = "r") -> list[tuple[int, int, str]]:
        """Create `topic` (if new) with `partitions` and append ``counts[p]`` records to partition p (a count, or
        (count, timestamp of the first in epoch ms; each next one 1 s later)): the (partition, offset, value) the
        broker acknowledged."""
        args = [f"{p}={_count(n)}:{prefix}" for p, n in sorted(counts.items())]
        proc = subprocess.run(["java", "-Xmx256m", "-cp", _classpath("job"), "statekit.kafkatest.KafkaTool",
                               self.bootstrap, topic, str(partitions), *args],
                              capture_output=True, text=True, timeout=180)
        if proc.returncode != 0:
            raise FlinkRunError(f"KafkaTool failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
        out = []
        for line in proc.stdout.splitlines():
            if line.startswith("PRODUCED "):
                _, p, o, v = line.split(" ", 3)
                out.append((int(p), int(o), v))
        return out


#: records to append to one partition: a count, or (count, timestamp of the first in epoch ms, each next 1 s later)
Count = int | tuple[int, int]


def _count(n: Count) -> str:
    return f"{n[0]}@{n[1]}" if isinstance(n, tuple) else str(n)


@dataclass
class JobSpec:
    """One run of the Kafka job: restore `restore` (None: start from the earliest offsets), wait for `expect`
    records, take a savepoint of the running job into `savepoint_dir` (None: none); `before` / `after` append
    records (partition -> `Count`) before the job starts and after its savepoint."""

    restore: Path | None
    expect: int
    savepoint_dir: Path | None = None
    before: dict[int, Count] = field(default_factory=dict)
    after: dict[int, Count] = field(default_factory=dict)
    prefix: str = "r"

    def arg(self) -> str:
        def counts(c: dict[int, Count]) -> str:
            return ";".join(f"{p}={_count(n)}:{self.prefix}" for p, n in sorted(c.items())) or "-"

        return f"{self.restore or '-'},{self.expect},{self.savepoint_dir or '-'},{counts(self.before)},{counts(self.after)}"


@dataclass
class JobRun:
    """What one run did: the records it emitted and appended (partition, offset, value each) and its savepoint."""

    records: list[tuple[int, int, str]] = field(default_factory=list)
    produced: list[tuple[int, int, str]] = field(default_factory=list)
    savepoint: Path | None = None

    def offsets(self) -> dict[int, list[int]]:
        """Per partition the offsets of the records emitted, in the order they were emitted."""
        out: dict[int, list[int]] = {}
        for p, o, _ in self.records:
            out.setdefault(p, []).append(o)
        return out


def run_jobs(bootstrap: str, topic: str, partitions: int, runs: list[JobSpec], *,
             timeout: float = 600) -> list[JobRun | str]:
    """Run the Kafka job once per spec, one after another in one JVM: per run what it did, or its failure text."""

    def record(run: JobRun, line: str) -> None:
        if line.startswith(("REC ", "PRODUCED ")):
            kind, p, o, v = line.split(" ", 3)
            (run.records if kind == "REC" else run.produced).append((int(p), int(o), v))

    return _run_job("statekit.kafkatest.OffsetsJob", [bootstrap, topic, str(partitions), *(r.arg() for r in runs)],
                    len(runs), record, timeout)


def run_file_jobs(directory: Path, runs: list[tuple[Path | str | None, int, Path | None, int]], *,
                  timeout: float = 600) -> list[JobRun | str]:
    """Run the file-source job over `directory` once per (restore savepoint, None or "@prev" - the savepoint of the
    run before -, lines to wait for, savepoint directory or None, microseconds to wait per line), one after another
    in one JVM: per run the lines it emitted before its savepoint (as ``records`` values) and the savepoint, or its
    failure text."""

    def record(run: JobRun, line: str) -> None:
        if line.startswith("REC "):
            run.records.append((-1, -1, line[4:]))

    return _run_job("statekit.kafkatest.FileOffsetsJob",
                    [str(directory), *(f"{r or '-'},{n},{d or '-'},{t}" for r, n, d, t in runs)],
                    len(runs), record, timeout)


def _run_job(job_class: str, args: list[str], n_runs: int, record: Callable[[JobRun, str], None],
             timeout: float) -> list[JobRun | str]:
    """Run `job_class` of the job jar and read its protocol: ``BEGIN i`` / ``END i`` around run i, ``ERROR i text``,
    ``SAVEPOINT path``, and the job's own lines, handed to `record(run, line)`."""
    build()
    proc = subprocess.run(["java", "-Xmx1g", *ADD_OPENS, "-cp", _classpath("job"), job_class, *args],
                          capture_output=True, text=True, timeout=timeout)
    results: list[JobRun | str | None] = [None] * n_runs
    current: JobRun | None = None
    for line in proc.stdout.splitlines():
        if line.startswith("BEGIN "):
            current = JobRun()
            results[int(line.split()[1])] = current
        elif line.startswith("END "):
            current = None
        elif line.startswith("ERROR "):
            _, idx, text = line.split(" ", 2)
            results[int(idx)] = text
            current = None
        elif line.startswith("SAVEPOINT ") and current is not None:
            current.savepoint = Path(line.split(" ", 1)[1].removeprefix("file:"))
        elif current is not None:
            record(current, line)
    if any(r is None for r in results):
        raise FlinkRunError(f"{job_class.rsplit('.', 1)[-1]} exited with {proc.returncode}:\n{proc.stderr[-6000:]}")
    return results  # type: ignore[return-value]
