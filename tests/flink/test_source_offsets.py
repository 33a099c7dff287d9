"""Issue 25 part 4 with real engines: a Kafka broker (KRaft, the Apache Kafka jars) started here on 127.0.0.1, a Flink
2.3.0 job reading a 2-partition topic with flink-connector-kafka's KafkaSource. `statekit offsets` shows exactly where
the job stood when its savepoint was taken (per partition the offset after the last record it emitted), and the job
restored from `statekit set-offsets --shift +1` resumes exactly one record later per partition, while the unmodified
savepoint resumes where it stood; `set-offsets --timestamp` (resolved by the broker) resumes exactly at the first record
at or after the time; a copy taken through statekit's own format and back keeps the enumerator state (no re-read).
File sources: a monitoring FileSource's reader moved by `set-offsets --path` resumes exactly there, and a file re-added
or skipped is read again or never; (`extended`) a savepoint taken while a large file is being read shows the reader's
position in it and the enumerator's processed paths, and the restored job resumes exactly at that position."""

from __future__ import annotations

import json
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

import pytest
from typer.testing import CliRunner

from statekit.errors import UnknownPartitionError
from statekit.savepoint.kafka_times import offsets_for_time
from statekit.savepoint.offsets import source_offsets
from statekit_cli.app import app

sys.path.insert(0, str(Path(__file__).parent))

import flink_harness  # noqa: E402
import kafka_harness  # noqa: E402

pytestmark = pytest.mark.flink

TOPIC = "events"
FIRST = {0: 5, 1: 7}  # records in the topic when the job runs and takes its savepoint
LATER = {0: 3, 1: 4}  # records appended after the savepoint
T0 = int(time.time() * 1000) - 3_600_000  # record j of FIRST has timestamp T0 + j s (per partition)
T1 = T0 + 100_000  # record j of LATER has timestamp T1 + j s


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    """One KRaft broker for the module (its JVM stopped at the end)."""
    why = flink_harness.missing_tools()
    if why:
        pytest.skip(why)
    b = kafka_harness.Broker(tmp_path_factory.mktemp("kafka"))
    yield b
    b.stop()


def _cli(*args: str) -> str:
    result = CliRunner().invoke(app, [str(a) for a in args])
    assert result.exit_code == 0, result.output
    return result.output


def test_offsets_of_a_running_kafka_job_and_a_shift_by_one(broker, tmp_path):
    (first,) = kafka_harness.run_jobs(broker.bootstrap, TOPIC, 2, [kafka_harness.JobSpec(
        None, sum(FIRST.values()), tmp_path / "savepoints", before={p: (n, T0) for p, n in FIRST.items()},
        after={p: (n, T1) for p, n in LATER.items()})])
    assert not isinstance(first, str), first
    assert first.savepoint is not None
    # the job emitted every record the topic held, in order per partition
    emitted = first.offsets()
    assert emitted == {p: list(range(n)) for p, n in FIRST.items()}
    appended = {}
    for p, o, _ in first.produced:
        appended.setdefault(p, []).append(o)
    assert appended == {p: list(range(n)) + list(range(n, n + LATER[p])) for p, n in FIRST.items()}

    # offsets: per partition the offset after the last record emitted before the savepoint, held by one reader
    table = source_offsets(first.savepoint)
    readers = [r for r in table.to_pylist() if r["holder"] == "reader"]
    assert {r["partition"]: r["offset"] for r in readers} == {p: max(o) + 1 for p, o in emitted.items()}
    assert sorted(r["subtask"] for r in readers) == [0, 1]
    assert all(r["topic"] == TOPIC and r["starting"] == "offset" and r["stopping_offset"] is None for r in readers)
    enum = [r for r in table.to_pylist() if r["holder"] == "enumerator"]
    assert sorted((r["partition"], r["status"]) for r in enum) == [(0, "assigned"), (1, "assigned")]
    shown = json.loads(_cli("offsets", first.savepoint, "--uid", "kafka-source", "--json"))
    assert shown == table.to_pylist()

    # set-offsets --shift +1, partition by partition (dry run first: nothing written)
    shifted_0 = tmp_path / "shifted-0"
    _cli("set-offsets", first.savepoint, shifted_0, "--uid", "kafka-source", "--topic", TOPIC, "--partition", "0",
         "--shift", "+1")
    assert not shifted_0.exists()
    _cli("set-offsets", first.savepoint, shifted_0, "--uid", "kafka-source", "--topic", TOPIC, "--partition", "0",
         "--shift", "+1", "--apply")
    shifted = tmp_path / "shifted"
    out = _cli("set-offsets", shifted_0, shifted, "--uid", "kafka-source", "--topic", TOPIC, "--partition", "1",
               "--shift", "+1", "--apply")
    assert f"wrote {shifted} as a Flink savepoint" in out
    moved = source_offsets(shifted).to_pylist()
    assert {r["partition"]: r["offset"] for r in moved if r["holder"] == "reader"} == {0: 6, 1: 8}
    assert {r["partition"]: r["offset"] for r in moved if r["holder"] == "enumerator"} == {0: 6, 1: 8}

    # another repair of a Flink savepoint (Flink in, Flink out) carries the enumerator's coordinator state as it is
    repaired = tmp_path / "repaired"
    _cli("convert", first.savepoint, repaired, "--to", "flink")
    assert source_offsets(repaired) == table, source_offsets(repaired).to_pylist()

    # through statekit's own format and back: the manifest keeps the enumerator's coordinator state
    round_trip = tmp_path / "round-trip"
    _cli("convert", first.savepoint, tmp_path / "as-statekit")
    assert source_offsets(tmp_path / "as-statekit") == table
    _cli("convert", tmp_path / "as-statekit", round_trip, "--to", "flink")
    assert source_offsets(round_trip) == table

    # set-offsets --timestamp: the broker resolves a time to the first record at or after it (partition 0: back to
    # record 2 of FIRST, given as ISO-8601; partition 1: T1 + 2.5 s lies between LATER's records 2 and 3, whose
    # offset is 7 + 3 = 10, given as epoch ms); past the last record, the partition's end
    iso = datetime.fromtimestamp((T0 + 2000) / 1000, tz=timezone.utc).isoformat()
    by_time_0 = tmp_path / "by-time-0"
    out = _cli("set-offsets", first.savepoint, by_time_0, "--uid", "kafka-source", "--topic", TOPIC, "--partition",
               "0", "--timestamp", iso, "--bootstrap-servers", broker.bootstrap, "--apply")
    assert "is offset 2, resolved by the broker" in out, out
    by_time = tmp_path / "by-time"
    _cli("set-offsets", by_time_0, by_time, "--uid", "kafka-source", "--topic", TOPIC, "--partition", "1",
         "--timestamp", str(T1 + 2500), "--bootstrap-servers", broker.bootstrap, "--apply")
    assert {(r["holder"], r["partition"]): r["offset"] for r in source_offsets(by_time).to_pylist()} == {
        ("reader", 0): 2, ("reader", 1): 10, ("enumerator", 0): 2, ("enumerator", 1): 10}
    assert offsets_for_time(broker.bootstrap, TOPIC, [0, 1], T1 + 60_000) == {
        p: n + LATER[p] for p, n in FIRST.items()}
    with pytest.raises(UnknownPartitionError, match="no partition"):
        offsets_for_time(broker.bootstrap, TOPIC, [5], T0)

    # restored: the shifted savepoint resumes one record later per partition; the original, the repaired one and the
    # statekit round trip where the job stood (each record once: a reader split and the enumerator agree); the one
    # moved by time exactly at the resolved offsets
    resumed, control, carried, through_statekit, timed = kafka_harness.run_jobs(broker.bootstrap, TOPIC, 2, [
        kafka_harness.JobSpec(shifted, sum(LATER.values()) - 2),
        kafka_harness.JobSpec(first.savepoint, sum(LATER.values())),
        kafka_harness.JobSpec(repaired, sum(LATER.values())),
        kafka_harness.JobSpec(round_trip, sum(LATER.values())),
        kafka_harness.JobSpec(by_time, (FIRST[0] + LATER[0] - 2) + 1),
    ])
    for run in (resumed, control, carried, through_statekit, timed):
        assert not isinstance(run, str), run
    assert control.offsets() == {p: list(range(n, n + LATER[p])) for p, n in FIRST.items()}
    assert carried.offsets() == control.offsets()
    assert through_statekit.offsets() == control.offsets()
    assert resumed.offsets() == {p: list(range(n + 1, n + LATER[p])) for p, n in FIRST.items()}
    assert timed.offsets() == {0: list(range(2, FIRST[0] + LATER[0])), 1: [10]}


LINE = 13  # bytes of "line-0000000\n"


@pytest.mark.extended
def test_file_source_position_and_processed_paths(tmp_path):
    why = flink_harness.missing_tools()
    if why:
        pytest.skip(why)
    src = tmp_path / "in"
    src.mkdir()
    big = src / "big.txt"
    big.write_text("".join(f"line-{i:07d}\n" for i in range(200_000)))
    (src / "small.txt").write_text("".join(f"line-{i:07d}\n" for i in range(3)))
    # a savepoint while big.txt is being read (the map waits 50 us per line), then a restore of it in the same JVM
    first, resumed = kafka_harness.run_file_jobs(src, [(None, 1000, tmp_path / "savepoints", 50),
                                                       ("@prev", 50, None, 50)])
    assert not isinstance(first, str), first
    assert not isinstance(resumed, str), resumed
    assert first.savepoint is not None
    rows = source_offsets(first.savepoint).to_pylist()
    readers = [r for r in rows if r["holder"] == "reader"]
    enum = [r for r in rows if r["holder"] == "enumerator"]
    assert all(r["source"] == "file" and r["operator"] == "file-source" for r in rows)
    # the enumerator has handed out both files (a monitoring enumerator never lists a processed path again)
    assert sorted(r["path"] for r in enum) == [f"file:{big}", f"file:{src / 'small.txt'}"]
    assert {r["status"] for r in enum} == {"processed"}
    # one reader holds big.txt's split (one split per file: text lines are not splittable), mid-file
    (reader,) = readers
    assert (reader["path"], reader["offset"], reader["length"]) == (f"file:{big}", 0, 200_000 * LINE)
    at = (max(reader["position"], 0) // LINE) + reader["records_to_skip"]
    assert len(first.records) <= at < 200_000
    # restored, the job reads big.txt on from exactly that line, and nothing of small.txt again
    lines = [v for _, _, v in resumed.records]
    assert lines[0] == f"line-{at:07d}"
    assert lines == [f"line-{i:07d}" for i in range(at, at + len(lines))]


@pytest.mark.extended  # ~20 s of JVM CPU; make test keeps the JVM-free file-source edits (tests/savepoint)
def test_file_source_set_offsets_restores(tmp_path):
    """`set-offsets --path` on a monitoring FileSource's savepoint taken mid-file: the reader moved 1000 lines on and a
    processed file taken off the enumerator's list restore as exactly those lines and that file again; a skipped file
    is never read."""
    why = flink_harness.missing_tools()
    if why:
        pytest.skip(why)
    src = tmp_path / "in"
    src.mkdir()
    n_big = 40_000
    big, small = src / "big.txt", src / "small.txt"
    big.write_text("".join(f"big-{i:07d}\n" for i in range(n_big)))  # 12 bytes a line
    small.write_text("".join(f"small-{i}\n" for i in range(3)))
    (first,) = kafka_harness.run_file_jobs(src, [(None, 300, tmp_path / "savepoints", 100)])
    assert not isinstance(first, str), first
    assert first.savepoint is not None
    # the premise: small.txt was read whole, big.txt is held by a reader mid-file
    assert sorted(v for _, _, v in first.records if v.startswith("small")) == ["small-0", "small-1", "small-2"]
    rows = source_offsets(first.savepoint).to_pylist()
    (reader,) = [r for r in rows if r["holder"] == "reader"]
    assert reader["path"] == f"file:{big}"
    at = max(reader["position"], 0) // 12 + reader["records_to_skip"]
    assert at + 1000 < n_big

    moved, skipped = tmp_path / "moved", tmp_path / "skipped"
    _cli("set-offsets", first.savepoint, tmp_path / "moved-0", "--uid", "file-source", "--path", big, "--shift",
         "+1000", "--apply")
    _cli("set-offsets", tmp_path / "moved-0", moved, "--uid", "file-source", "--path", f"file:{small}", "--reread",
         "--apply")
    out = _cli("set-offsets", first.savepoint, tmp_path / "skipped-0", "--uid", "file-source", "--path", big,
               "--skip-file", "--apply")
    assert "dropped" in out
    _cli("set-offsets", tmp_path / "skipped-0", skipped, "--uid", "file-source", "--path", small, "--reread", "--apply")
    shown = {(r["holder"], r["path"], r["status"]): r["records_to_skip"] for r in source_offsets(moved).to_pylist()}
    assert shown == {("reader", f"file:{big}", None): reader["records_to_skip"] + 1000,
                     ("enumerator", f"file:{big}", "processed"): None}
    assert [r["holder"] for r in source_offsets(skipped).to_pylist()] == ["enumerator"]

    # restored (no throttle: each run waits 2 s after its lines, so a line too many shows)
    rest = n_big - at - 1000
    resumed, only_small = kafka_harness.run_file_jobs(src, [(moved, rest + 3, None, 0), (skipped, 3, None, 0)])
    assert not isinstance(resumed, str), resumed
    assert not isinstance(only_small, str), only_small
    lines = [v for _, _, v in resumed.records]
    assert [v for v in lines if v.startswith("big")] == [f"big-{i:07d}" for i in range(at + 1000, n_big)]
    assert sorted(v for v in lines if v.startswith("small")) == ["small-0", "small-1", "small-2"]
    assert sorted(v for _, _, v in only_small.records) == ["small-0", "small-1", "small-2"]
