"""`statekit offsets` / `set-offsets` on a Kafka-source savepoint with many partitions, against parsing `_metadata` alone.

The savepoint is the committed real one (tests/fixtures/flink/kafka/kafka-source-2p: Flink 2.3.0, KafkaSource of
flink-connector-kafka 5.0.0-2.2, parallelism 2) grown to N partitions: each reader subtask's `SourceReaderState`
stream holds N/2 splits (a file next to `_metadata`, as Flink writes state above its inline threshold) and the
enumerator state (version 3) all N, written with statekit's own encoders into the real operator record. Measured:

* ``source_offsets``: every split and enumerator entry decoded into the Arrow table
* ``set_offsets`` dry run and ``--apply`` (one partition moved; the new savepoint written)
* ``statekit offsets --json`` as a whole fresh process
* baseline, same run: ``read_metadata`` of the same `_metadata` (what any reader of the savepoint pays)

    python bench/offsets.py [--partitions N]

The machine is shared: numbers move with load, which is printed with them.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

from processes import installed_env  # bench/ is on sys.path when run as a script

from statekit.format.flink.metadata import OperatorStateEntry, StreamHandle, read_metadata
from statekit.format.flink.serializers_out import DataOutput
from statekit.format.flink.sources import (
    CoordinatorState,
    EnumeratorPartition,
    KafkaEnumeratorState,
    KafkaSplit,
    encode_reader_split,
    operator_record,
)
from statekit.savepoint.offsets import set_offsets, source_offsets

FIXTURE = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "flink" / "kafka" / "kafka-source-2p"


def load() -> str:
    return "load average " + " ".join(f"{x:.1f}" for x in os.getloadavg())


def grown(n: int, where: Path) -> Path:
    """The fixture with N partitions of topic `events` (offsets 1000 + p), split over its two reader subtasks."""
    md = read_metadata(FIXTURE)
    fop = next(o for o in md.operators if o.uid == "kafka-source")
    out = where / f"kafka-{n}"
    out.mkdir()
    subtasks = []
    for st in fop.subtasks:
        h = st.managed_operator
        assert h is not None and h.delegate.data is not None
        (entry,) = h.states
        head = h.delegate.data[:entry.offsets[0]]  # the stream's proxy: state name, mode, serializer snapshot
        buf = DataOutput().raw(head)
        offsets = []
        for p in range(st.index, n, len(fop.subtasks)):
            offsets.append(len(buf.buf))
            element = encode_reader_split(KafkaSplit("events", p, 1000 + p))
            buf.i32(len(element)).raw(element)
        name = f"reader-{st.index}"
        (out / name).write_bytes(bytes(buf.buf))
        stream = StreamHandle("relative", name, len(buf.buf))
        subtasks.append(replace(st, managed_operator=replace(
            h, states=(OperatorStateEntry(entry.name, entry.mode, tuple(offsets)),), delegate=stream)))
    enum = KafkaEnumeratorState(3, tuple(EnumeratorPartition("events", p, "assigned", KafkaSplit("events", p, -2))
                                         for p in range(n)), True)
    assert fop.coordinator is not None and fop.coordinator.data is not None
    coordinator = replace(CoordinatorState.decode(fop.coordinator.data, "x"), enumerator=enum.encode()).encode()
    record = operator_record(replace(fop, subtasks=tuple(subtasks),
                                     coordinator=replace(fop.coordinator, data=coordinator, size=len(coordinator))),
                             md.version)
    data = (FIXTURE / "_metadata").read_bytes()
    start, end = fop.span
    (out / "_metadata").write_bytes(data[:start] + record + data[end:])
    return out


def timed(fn, repeat: int = 3) -> tuple[float, object]:
    best, out = float("inf"), None
    for _ in range(repeat):
        t = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t)
    return best, out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--partitions", type=int, default=4096)
    n = ap.parse_args().partitions
    work = Path(tempfile.mkdtemp(prefix="statekit-offsets-bench-"))
    try:
        sp = grown(n, work)
        base, _ = timed(lambda: read_metadata(sp))
        t_read, table = timed(lambda: source_offsets(sp))
        assert table.num_rows == 2 * n, table.num_rows  # type: ignore[attr-defined]
        t_dry, _ = timed(lambda: set_offsets(sp, work / "dry", op="kafka-source", topic="events", partition=n - 1,
                                             shift=1))
        counter = iter(range(100))
        t_apply, _ = timed(lambda: set_offsets(sp, work / f"out-{next(counter)}", op="kafka-source", topic="events",
                                               partition=n - 1, shift=1, dry_run=False))
        statekit = Path(sys.executable).with_name("statekit")
        t = time.perf_counter()
        subprocess.run([str(statekit), "offsets", str(sp), "--json"], check=True, stdout=subprocess.DEVNULL,
                       env=installed_env())
        t_cli = time.perf_counter() - t
        print(f"offsets of a Kafka source with {n} partitions ({2 * n} rows), best of 3; {load()}")
        print(f"  baseline read_metadata           {base * 1000:8.1f} ms")
        print(f"  source_offsets                   {t_read * 1000:8.1f} ms   {n / t_read:,.0f} partitions/s   "
              f"x{t_read / base:.1f} the baseline")
        print(f"  set_offsets (dry run)            {t_dry * 1000:8.1f} ms   x{t_dry / base:.1f} the baseline")
        print(f"  set_offsets --apply (written)    {t_apply * 1000:8.1f} ms   x{t_apply / base:.1f} the baseline")
        print(f"  statekit offsets --json (process){t_cli * 1000:8.1f} ms")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
