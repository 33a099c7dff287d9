"""Source offsets (issue 25 part 4) on a real Flink 2.3.0 Kafka-source savepoint (tests/fixtures/flink/kafka): the table,
the rewrite (exactly the changed offsets differ, every other byte kept), the CLI, and bad input refused with nothing
written. The restore of rewritten savepoints into a real job with a real broker is tests/flink/test_source_offsets.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from savepoint_helpers import filed_kafka
from typer.testing import CliRunner

from statekit.errors import (
    BrokerError,
    BrokerRequiredError,
    CorruptSavepointError,
    InvalidArgumentError,
    NoSourceStateError,
    UnknownOperatorError,
    UnknownPartitionError,
    UnsupportedFormatError,
)
from statekit.format.flink.metadata import read_metadata
from statekit.format.flink.sources import (
    NO_STOPPING_OFFSET,
    CoordinatorState,
    EnumeratorPartition,
    KafkaEnumeratorState,
    KafkaSplit,
    check_record,
    decode_reader_split,
    encode_reader_split,
    kafka_enumerator,
)
from statekit.savepoint import Savepoint
from statekit.savepoint.offsets import OFFSETS_SCHEMA, set_offsets, source_offsets
from statekit_cli.app import app

KAFKA = Path(__file__).resolve().parents[1] / "fixtures" / "flink" / "kafka" / "kafka-source-2p"


def _positions(path, holder="reader"):
    return {(r["topic"], r["partition"]): r["offset"] for r in source_offsets(path).to_pylist() if r["holder"] == holder}


def test_offsets_of_the_real_savepoint():
    t = source_offsets(KAFKA)
    assert t.schema == OFFSETS_SCHEMA
    rows = t.to_pylist()
    readers = [r for r in rows if r["holder"] == "reader"]
    assert [(r["partition"], r["offset"], r["subtask"]) for r in readers] == [(0, 5, 1), (1, 7, 0)]
    assert all(r["operator"] == "kafka-source" and r["source"] == "kafka" and r["stopping_offset"] is None
               and r["starting"] == "offset" and r["status"] is None for r in readers)
    enum = [r for r in rows if r["holder"] == "enumerator"]
    assert [(r["partition"], r["offset"], r["starting"], r["status"]) for r in enum] == [
        (0, -2, "earliest", "assigned"), (1, -2, "earliest", "assigned")]
    # the library call on an open savepoint, one operator, and an operator without source state
    sp = Savepoint.open(KAFKA)
    assert sp.source_offsets("kafka-source") == t
    with pytest.raises(NoSourceStateError, match="emit"):
        sp.source_offsets("emit")


def test_set_offsets_rewrites_exactly_the_offsets(tmp_path):
    before = (KAFKA / "_metadata").read_bytes()
    plan = set_offsets(KAFKA, tmp_path / "dry", op="kafka-source", topic="events", partition=1, shift=1)
    assert not (tmp_path / "dry").exists() and not plan.written
    assert [(c.holder, c.subtask, c.old, c.new) for c in plan.changes] == [("reader", 0, 7, 8), ("enumerator", None, -2, 8)]
    out = tmp_path / "out"
    set_offsets(KAFKA, out, op="kafka-source", topic="events", partition=1, shift=1, dry_run=False)
    assert (KAFKA / "_metadata").read_bytes() == before  # the source is never modified
    assert _positions(out) == {("events", 0): 5, ("events", 1): 8}
    assert _positions(out, "enumerator") == {("events", 0): -2, ("events", 1): 8}
    after = (out / "_metadata").read_bytes()
    assert len(after) == len(before)
    changed = [i for i in range(len(before)) if before[i] != after[i]]
    # two 8-byte offsets: the reader's split (7 -> 8) and the enumerator's (earliest -> 8)
    assert len(changed) <= 16 and changed[-1] - changed[0] > 8
    # an absolute offset, on top: --offset 0 rewinds partition 0
    again = tmp_path / "again"
    set_offsets(out, again, op="kafka-source", topic="events", partition=0, offset=0, dry_run=False)
    assert _positions(again) == {("events", 0): 0, ("events", 1): 8}
    # the rest of the savepoint reads as before
    assert [o.uid_hash for o in Savepoint.open(again).operators] == [o.uid_hash for o in Savepoint.open(KAFKA).operators]


def test_rewritten_stream_files_are_new_files(tmp_path):
    """Reader state in a file next to `_metadata` (a larger source state): the rewritten stream is a new file, the
    others are carried; the same rewrite as when the state is inline."""
    src = filed_kafka(tmp_path / "filed")
    assert _positions(src) == _positions(KAFKA)
    out = tmp_path / "out"
    set_offsets(src, out, op="kafka-source", topic="events", partition=0, offset=11, dry_run=False)
    assert _positions(out) == {("events", 0): 11, ("events", 1): 7}
    files = sorted(p.name for p in out.iterdir())
    assert "op-state-0" in files and "op-state-1" in files and len(files) == 4  # + a new stream file + _metadata
    assert (src / "op-state-1").read_bytes() == (out / "op-state-1").read_bytes()


@pytest.mark.parametrize("kwargs, error, match", [
    ({"op": "emit", "topic": "events", "partition": 0, "shift": 1}, NoSourceStateError, "emit"),
    ({"op": "discard", "topic": "events", "partition": 0, "offset": 3}, NoSourceStateError, "discard"),
    ({"op": "kafka-source", "topic": "events", "partition": 2, "shift": 1}, UnknownPartitionError, "events/2"),
    ({"op": "kafka-source", "topic": "other", "partition": 0, "shift": 1}, UnknownPartitionError, "events/0, events/1"),
    ({"op": "kafka-source", "topic": "events", "partition": 0}, InvalidArgumentError, "exactly one"),
    ({"op": "kafka-source", "topic": "events", "partition": 0, "shift": 1, "offset": 3}, InvalidArgumentError, "exactly one"),
    ({"op": "kafka-source", "topic": "events", "partition": 0, "shift": -6}, InvalidArgumentError, "would be -1"),
    ({"op": "kafka-source", "topic": "events", "partition": 0, "offset": -1}, InvalidArgumentError, "would be -1"),
    ({"op": "kafka-source", "topic": "events", "partition": 0, "timestamp": "2026-12-04T10:00:00Z"},
     BrokerRequiredError, "offsets only"),
    ({"op": "kafka-source", "topic": "events", "partition": 0, "timestamp": "yesterday",
      "bootstrap_servers": "127.0.0.1:9"}, InvalidArgumentError, "ISO-8601"),
    ({"op": "kafka-source", "topic": "events", "partition": 0, "timestamp": 5, "offset": 3}, InvalidArgumentError,
     "exactly one"),
    ({"op": "no-such-uid", "topic": "events", "partition": 0, "offset": 3}, UnknownOperatorError, "no-such-uid"),
])
def test_bad_input_writes_nothing(tmp_path, kwargs, error, match):
    before = (KAFKA / "_metadata").read_bytes()
    with pytest.raises(error, match=match):
        set_offsets(KAFKA, tmp_path / "out", dry_run=False, **kwargs)
    assert list(tmp_path.iterdir()) == []  # no target, no staging left behind
    assert (KAFKA / "_metadata").read_bytes() == before


def test_statekit_savepoints_keep_the_enumerator_state_and_are_not_rewritten(tmp_path):
    """`convert` keeps each operator's coordinator state in the manifest (``flink.coordinator``): the statekit copy
    shows what the Flink savepoint shows, a statekit repair carries it, and Flink -> statekit -> Flink gives it back
    byte for byte (tests/flink/test_source_offsets.py restores such a round trip: no re-read)."""
    from statekit.format.manifest import load_manifest
    from statekit.savepoint.convert import convert_to_statekit
    from statekit.savepoint.flink_out import write_flink
    from statekit.savepoint.transforms import change_operator_identifier

    converted = tmp_path / "converted"
    convert_to_statekit(KAFKA, converted)
    assert source_offsets(converted) == source_offsets(KAFKA)
    (op,) = [m for m in load_manifest(converted).operators if m.uid == "kafka-source"]
    original = next(o for o in read_metadata(KAFKA).operators if o.uid == "kafka-source").coordinator.data
    assert op.flink is not None and op.flink.coordinator == original
    back = write_flink(converted, tmp_path / "back")
    assert next(o for o in read_metadata(back).operators if o.uid == "kafka-source").coordinator.data == original
    assert source_offsets(back) == source_offsets(KAFKA)
    # a statekit -> statekit repair (rename) carries it with the operator
    renamed = change_operator_identifier(converted, tmp_path / "renamed", "kafka-source", "kafka-source-2",
                                         dry_run=False).target
    (op2,) = [m for m in load_manifest(renamed).operators if m.uid == "kafka-source-2"]
    assert op2.flink is not None and op2.flink.coordinator == original
    with pytest.raises(UnsupportedFormatError, match="statekit savepoint"):
        set_offsets(converted, tmp_path / "out", op="kafka-source", topic="events", partition=0, shift=1, dry_run=False)
    assert not (tmp_path / "out").exists()


def test_cli(tmp_path):
    runner = CliRunner()
    r = runner.invoke(app, ["offsets", str(KAFKA)])
    assert r.exit_code == 0, r.output
    assert "kafka-source" in r.output and "earliest" in r.output and "subtask 1" in r.output
    r = runner.invoke(app, ["offsets", str(KAFKA), "--json"])
    assert json.loads(r.output) == source_offsets(KAFKA).to_pylist()
    out = tmp_path / "out"
    args = ["set-offsets", str(KAFKA), str(out), "--uid", "kafka-source", "--topic", "events", "--partition", "0"]
    r = runner.invoke(app, [*args, "--shift", "+1"])
    assert r.exit_code == 0 and "events/0 (reader subtask 1): 5 -> 6" in r.output and not out.exists()
    r = runner.invoke(app, [*args, "--offset", "2", "--apply"])
    assert r.exit_code == 0, r.output
    assert _positions(out)[("events", 0)] == 2
    for bad, code in ((["--uid", "emit"], 2), (["--partition", "9"], 2)):
        argv = ["set-offsets", str(KAFKA), str(tmp_path / "bad"), "--uid", "kafka-source", "--topic", "events",
                "--partition", "0", "--shift", "1", "--apply"]
        for i in range(0, len(bad), 2):
            argv[argv.index(bad[i]) + 1] = bad[i + 1]
        r = runner.invoke(app, argv)
        assert r.exit_code == code, r.output
        assert not (tmp_path / "bad").exists()
    r = runner.invoke(app, [*args, "--apply"])  # neither --offset nor --shift
    assert r.exit_code == 2


def test_split_and_enumerator_codecs():
    split = KafkaSplit("t", 3, 42, 100)
    assert decode_reader_split(encode_reader_split(split), "x") == split
    assert KafkaSplit("t", 0, -3).starting == "committed" and KafkaSplit("t", 0, 5).stopping_offset is None
    with pytest.raises(CorruptSavepointError):
        KafkaSplit.decode(split.encode() + b"\x00", "x")  # not every byte used: not a Kafka split
    # the ASCII fast path and the general decoder agree (a non-ASCII topic takes the general one)
    from statekit.format.flink.binary import DataInput

    for topic in ("events", "événements", "t\u0000x", ""):
        for s_ in (KafkaSplit(topic, 7, 3, 9), KafkaSplit(topic, 0, -2)):
            b = s_.encode()
            inp = DataInput(b, "x")
            general = KafkaSplit(inp.utf(), inp.i32(), inp.i64(), inp.i64())
            assert KafkaSplit.decode(b, "x") == general == s_
    with pytest.raises(CorruptSavepointError):
        KafkaSplit.decode(KafkaSplit("t", 0, -7).encode(), "x")  # not an offset, not a marker
    parts = (EnumeratorPartition("a", 0, "assigned", KafkaSplit("a", 0, 7)),
             EnumeratorPartition("b", 1, "unassigned", KafkaSplit("b", 1, -2, NO_STOPPING_OFFSET)))
    for version in (1, 2, 3):
        ps = parts if version == 3 else tuple(EnumeratorPartition(p.topic, p.partition,
                                                                  p.status if version == 2 else "assigned") for p in parts)
        state = KafkaEnumeratorState(version, ps, version != 2)  # version 1 stores no flag: read as True
        wrapped = CoordinatorState(version, state.encode()).encode()
        assert kafka_enumerator(wrapped, "x") == state
    with pytest.raises(UnsupportedFormatError, match="version 0"):
        KafkaEnumeratorState.decode(0, b"", "x")
    # the fixture's source record is written back byte for byte (what every rewrite checks first)
    md = read_metadata(KAFKA)
    data = (KAFKA / "_metadata").read_bytes()
    for op in md.operators:
        check_record(op, data, md.version, "x")



def test_repairs_carry_the_enumerator_state(tmp_path):
    """Flink in, Flink out: every repair's savepoint keeps the operator coordinators' states byte for byte (without
    them a restored KafkaSource starts a fresh enumerator and reads its topic again from the start:
    tests/flink/test_source_offsets.py restores one)."""
    from statekit.savepoint.flink_out import write_flink
    from statekit.savepoint.patch import RemoveOperator, repair

    def coordinator(path):
        md = read_metadata(path)
        return next(o for o in md.operators if o.uid == "kafka-source").coordinator.data

    repair(KAFKA, tmp_path / "removed", [RemoveOperator("emit")], dry_run=False)
    assert coordinator(tmp_path / "removed") == coordinator(KAFKA)
    write_flink(KAFKA, tmp_path / "flink")  # convert --to flink
    assert coordinator(tmp_path / "flink") == coordinator(KAFKA)
    assert source_offsets(tmp_path / "flink") == source_offsets(KAFKA)


def test_a_renamed_source_keeps_its_enumerator_state(tmp_path):
    from statekit.savepoint.patch import RenameOperator, repair
    from statekit.savepoint.transforms import change_operator_identifier

    def enumerator_rows(path, uid):
        return [{k: v for k, v in r.items() if k not in ("operator", "uid_hash")}
                for r in source_offsets(path, uid).to_pylist() if r["holder"] == "enumerator"]

    original = enumerator_rows(KAFKA, "kafka-source")
    assert len(original) == 2
    repair(KAFKA, tmp_path / "a", [RenameOperator("kafka-source", "kafka-in")], dry_run=False)
    change_operator_identifier(KAFKA, tmp_path / "b", "kafka-source", "kafka-in")
    for out in ("a", "b"):
        assert enumerator_rows(tmp_path / out, "kafka-in") == original


FILES = KAFKA.parent / "file-source-mid-file"


def test_file_source_offsets():
    rows = source_offsets(FILES).to_pylist()
    (reader,) = [r for r in rows if r["holder"] == "reader"]
    assert reader["source"] == "file" and reader["subtask"] == 1
    assert reader["path"].endswith("/in/big.txt") and reader["path"].startswith("file:/")
    assert (reader["offset"], reader["length"], reader["position"], reader["records_to_skip"]) == (0, 2_600_000, -1, 1763)
    assert reader["topic"] is None and reader["partition"] is None
    (enum,) = [r for r in rows if r["holder"] == "enumerator"]
    assert (enum["path"], enum["status"], enum["offset"]) == (reader["path"], "processed", None)
    # Kafka's options on a file source: refused by name, nothing written
    with pytest.raises(UnsupportedFormatError, match="file source"):
        set_offsets(FILES, FILES.parent / "never", op="file-source", topic="t", partition=0, offset=1, dry_run=False)
    assert not (FILES.parent / "never").exists()
    r = CliRunner().invoke(app, ["offsets", str(FILES)])
    assert r.exit_code == 0 and "+1763 records" in r.output and "enumerator (processed)" in r.output


def test_file_source_set_offsets(tmp_path):
    """A file source's reader moved (--shift, --records), a file skipped and read again: each a new savepoint whose
    `_metadata` differs from the source's only in the source operator's record, decoded back as asked (the restores
    are tests/flink/test_source_offsets.py)."""
    from statekit.format.flink.sources import FileEnumeratorState, file_enumerator
    from statekit.savepoint.offsets import set_file_offsets

    big = next(r["path"] for r in source_offsets(FILES).to_pylist() if r["holder"] == "reader")
    md = read_metadata(FILES)
    fop = next(o for o in md.operators if o.uid == "file-source")
    enum = file_enumerator(fop.coordinator.data, "x")
    assert FileEnumeratorState(enum.pending, enum.processed).encode() == CoordinatorState.decode(
        fop.coordinator.data, "x").enumerator  # the encoder gives back Flink's bytes

    def rows(path):
        return [(r["holder"], r["path"], r["status"], r["position"], r["records_to_skip"])
                for r in source_offsets(path).to_pylist()]

    before = (FILES / "_metadata").read_bytes()
    plan = set_file_offsets(FILES, tmp_path / "dry", op="file-source", path=big, shift=1)
    assert not (tmp_path / "dry").exists() and "+1763 records -> the split's start +1764 records" in str(plan)
    set_file_offsets(FILES, tmp_path / "shift", op="file-source", path=big, shift=1, dry_run=False)
    assert rows(tmp_path / "shift") == [("reader", big, None, -1, 1764), ("enumerator", big, "processed", None, None)]
    after = (tmp_path / "shift" / "_metadata").read_bytes()
    start, end = fop.span
    assert after[:start] == before[:start] and after[len(after) - (len(before) - end):] == before[end:]
    set_file_offsets(FILES, tmp_path / "records", op="file-source", path=big, records=0, dry_run=False)
    assert rows(tmp_path / "records")[0] == ("reader", big, None, -1, 0)
    set_file_offsets(FILES, tmp_path / "skip", op="file-source", path=big, skip_file=True, dry_run=False)
    assert rows(tmp_path / "skip") == [("enumerator", big, "processed", None, None)]
    set_file_offsets(tmp_path / "skip", tmp_path / "reread", op="file-source", path=big, reread=True, dry_run=False)
    assert rows(tmp_path / "reread") == []
    # the CLI, by local path (the fixture's file need not exist)
    r = CliRunner().invoke(app, ["set-offsets", str(FILES), str(tmp_path / "cli"), "--uid", "file-source", "--path",
                                 big.removeprefix("file:"), "--shift", "+1", "--apply"])
    assert r.exit_code == 0, r.output
    assert rows(tmp_path / "cli") == rows(tmp_path / "shift")
    assert (FILES / "_metadata").read_bytes() == before


@pytest.mark.parametrize("kwargs, error, match", [
    ({"path": "file:/nowhere.txt", "shift": 1}, UnknownPartitionError, "no split of file:/nowhere.txt"),
    ({"path": "BIG", "reread": True}, InvalidArgumentError, "still being read"),
    ({"path": "file:/nowhere.txt", "reread": True}, UnknownPartitionError, "has not processed"),
    ({"path": "BIG", "shift": 1, "skip_file": True}, InvalidArgumentError, "exactly one"),
    ({"path": "BIG"}, InvalidArgumentError, "exactly one"),
    ({"path": "BIG", "records": -1}, InvalidArgumentError, ">= 0"),
    ({"path": "BIG", "shift": -1764}, InvalidArgumentError, "would stand -1 records"),
    ({"path": "BIG", "shift": 1, "op": "emit"}, NoSourceStateError, "emit"),
    ({"path": "BIG", "shift": 1, "src": "kafka"}, UnsupportedFormatError, "kafka source"),
])
def test_file_source_bad_input_writes_nothing(tmp_path, kwargs, error, match):
    from statekit.savepoint.offsets import set_file_offsets

    big = next(r["path"] for r in source_offsets(FILES).to_pylist() if r["holder"] == "reader")
    kwargs = {"op": "file-source", **kwargs, "path": big if kwargs["path"] == "BIG" else kwargs["path"]}
    src = KAFKA if kwargs.pop("src", None) == "kafka" else FILES
    if src is KAFKA:
        kwargs["op"] = "kafka-source"
    before = (src / "_metadata").read_bytes()
    with pytest.raises(error, match=match):
        set_file_offsets(src, tmp_path / "out", dry_run=False, **kwargs)
    assert list(tmp_path.iterdir()) == []
    assert (src / "_metadata").read_bytes() == before


def _with_enumerator(tmp_path, enum: KafkaEnumeratorState) -> Path:
    """The fixture with another Kafka enumerator state in its coordinator (the readers unchanged)."""
    from dataclasses import replace

    from statekit.format.flink.sources import operator_record

    md = read_metadata(KAFKA)
    fop = next(o for o in md.operators if o.uid == "kafka-source")
    assert fop.coordinator is not None and fop.coordinator.data is not None
    data = CoordinatorState(enum.version, enum.encode()).encode()
    record = operator_record(replace(fop, coordinator=replace(fop.coordinator, data=data, size=len(data))), md.version)
    out = tmp_path / f"enum-v{enum.version}"
    out.mkdir()
    original = (KAFKA / "_metadata").read_bytes()
    (out / "_metadata").write_bytes(original[:fop.span[0]] + record + original[fop.span[1]:])
    return out


def test_a_partition_only_the_enumerator_holds(tmp_path):
    """A partition discovered but not assigned yet (no reader holds it): only the enumerator's entry moves, and a
    shift from its `earliest` marker is refused (there is no offset to shift from)."""
    parts = (EnumeratorPartition("events", 0, "assigned", KafkaSplit("events", 0, -2)),
             EnumeratorPartition("events", 1, "assigned", KafkaSplit("events", 1, -2)),
             EnumeratorPartition("events", 2, "unassigned", KafkaSplit("events", 2, -2)))
    src = _with_enumerator(tmp_path, KafkaEnumeratorState(3, parts, True))
    with pytest.raises(InvalidArgumentError, match="earliest"):
        set_offsets(src, tmp_path / "out", op="kafka-source", topic="events", partition=2, shift=1, dry_run=False)
    plan = set_offsets(src, tmp_path / "out", op="kafka-source", topic="events", partition=2, offset=4, dry_run=False)
    assert [(c.holder, c.old, c.new) for c in plan.changes] == [("enumerator", -2, 4)]
    rows = source_offsets(tmp_path / "out").to_pylist()
    assert [(r["partition"], r["offset"], r["status"]) for r in rows if r["holder"] == "enumerator"] == [
        (0, -2, "assigned"), (1, -2, "assigned"), (2, 4, "unassigned")]
    assert _positions(tmp_path / "out") == _positions(KAFKA)


def test_enumerator_state_without_offsets(tmp_path):
    """flink-connector-kafka 4.0 (version 2) stores partitions and their status, no offsets: the readers move, the
    enumerator's bytes stay as they were."""
    parts = (EnumeratorPartition("events", 0, "assigned"), EnumeratorPartition("events", 1, "assigned"))
    src = _with_enumerator(tmp_path, KafkaEnumeratorState(2, parts, True))
    rows = [r for r in source_offsets(src).to_pylist() if r["holder"] == "enumerator"]
    assert [(r["partition"], r["offset"], r["starting"], r["status"]) for r in rows] == [
        (0, None, None, "assigned"), (1, None, None, "assigned")]
    plan = set_offsets(src, tmp_path / "out", op="kafka-source", topic="events", partition=0, shift=1, dry_run=False)
    assert [(c.holder, c.old, c.new) for c in plan.changes] == [("reader", 5, 6)]
    coordinator = [o.coordinator.data for o in read_metadata(tmp_path / "out").operators if o.uid == "kafka-source"]
    assert coordinator == [o.coordinator.data for o in read_metadata(src).operators if o.uid == "kafka-source"]
    assert _positions(tmp_path / "out") == {("events", 0): 6, ("events", 1): 7}


def test_timestamps_parse_and_an_unreachable_broker_is_a_typed_error(tmp_path):
    """The time -> offset resolution against a live broker is tests/flink/test_source_offsets.py; here the parts that
    need none: the forms a timestamp takes, and a broker that does not answer (nothing written, source untouched)."""
    import socket

    from statekit.savepoint.kafka_times import offsets_for_time, parse_timestamp

    assert parse_timestamp("1733306400000") == parse_timestamp(1733306400000) == 1733306400000
    assert parse_timestamp("2024-12-04T10:00:00Z") == parse_timestamp("2024-12-04T10:00:00") == 1733306400000
    assert parse_timestamp("2024-12-04T11:00:00+01:00") == 1733306400000
    # A port bound and never listened on refuses every connection, and stays ours while the client tries it (a port
    # freed first can be taken by a server of another test meanwhile: the client then waits on a stranger).
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        with pytest.raises(BrokerError, match=f"no Kafka broker answered at 127.0.0.1:{port}"):
            offsets_for_time(f"127.0.0.1:{port}", "events", [0], 0, timeout_s=2)
    before = (KAFKA / "_metadata").read_bytes()
    r = CliRunner().invoke(app, ["set-offsets", str(KAFKA), str(tmp_path / "out"), "--uid", "kafka-source", "--topic",
                                 "events", "--partition", "0", "--timestamp", "2024-12-04T10:00:00Z", "--apply"])
    assert r.exit_code == 2 and "BrokerRequiredError" in r.output and "--bootstrap-servers" in r.output, r.output
    assert not (tmp_path / "out").exists() and (KAFKA / "_metadata").read_bytes() == before
