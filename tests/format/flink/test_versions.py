"""Flink version lines: parsing, the newest, metadata layouts per line, and targets that cannot hold what is written."""

from __future__ import annotations

import json

import pytest

from statekit.errors import FlinkVersionMismatchError, InvalidArgumentError, UnknownFlinkVersionError
from statekit.format.flink.binary import DataInput
from statekit.format.flink.metadata import read_metadata
from statekit.format.flink.serializers import COMPOSITE_MAGIC, NESTED_MAGIC, FlinkType, read_versioned
from statekit.format.flink.serializers_out import DataOutput
from statekit.format.flink.snapshot_table import LINES, SNAPSHOTS
from statekit.format.flink.versions import METADATA_VERSION_OF, FlinkVersion, check_serializers, serializer_problems
from statekit.savepoint import Savepoint
from statekit.savepoint.flink_out import write_flink

from .conftest import FIXTURES, VERSION_CASES, savepoint

SUPPORTED = ("1.18", "1.19", "1.20", "2.0", "2.1", "2.2", "2.3")
_BASE = "org.apache.flink.api.common.typeutils.base."
SET = _BASE + "SetSerializerSnapshot"
STRING = _BASE + "StringSerializer$StringSerializerSnapshot"
EITHER = "org.apache.flink.api.java.typeutils.runtime.EitherSerializerSnapshot"


@pytest.mark.parametrize("text,line,metadata", [
    ("1.18", "1.18", 4), ("1.19.3", "1.19", 4), (" 1.20.5 ", "1.20", 4), ("2.0", "2.0", 5), ("2.0.2", "2.0", 5),
    ("2.1.3", "2.1", 6), ("2.2", "2.2", 6), ("2.3.0", "2.3", 6),
])
def test_parse_a_line_or_a_release(text, line, metadata):
    v = FlinkVersion.parse(text)
    assert (v.line, str(v), v.metadata_version) == (line, line, metadata)
    assert FlinkVersion.parse(v) is v
    assert v.describe() == f"Flink {line} (_metadata v{metadata})"


@pytest.mark.parametrize("text", ["1.17", "1.17.2", "2.4", "3.0", "0.9"])
def test_an_unknown_line_is_refused_listing_the_supported(text):
    with pytest.raises(UnknownFlinkVersionError, match="not a version statekit writes savepoints for") as e:
        FlinkVersion.parse(text)
    assert e.value.supported == SUPPORTED and "1.18, 1.19, 1.20, 2.0, 2.1, 2.2, 2.3" in str(e.value)
    assert isinstance(e.value, InvalidArgumentError)  # callers catching argument errors still do


@pytest.mark.parametrize("text", ["", "latest", "1", "1.20.x", "v1.20", "1..20"])
def test_what_is_no_version_at_all_is_refused_listing_the_supported(text):
    with pytest.raises(UnknownFlinkVersionError, match="is not a Flink version.*supported: 1.18") as e:
        FlinkVersion.parse(text)
    assert e.value.supported == SUPPORTED


def test_lines_are_ordered_and_the_newest_is_the_default_of_a_new_bootstrap():
    parsed = [FlinkVersion.parse(x) for x in SUPPORTED]
    assert sorted(reversed(parsed)) == parsed
    assert FlinkVersion.newest() == max(parsed) == FlinkVersion.parse("2.3")
    assert tuple(METADATA_VERSION_OF) == SUPPORTED == LINES  # the snapshot table covers every line written for


@pytest.mark.parametrize("metadata,line", [(3, "1.20"), (4, "1.20"), (5, "2.0"), (6, "2.3")])
def test_for_metadata_version_is_the_newest_line_writing_it(metadata, line):
    assert FlinkVersion.for_metadata_version(metadata) == FlinkVersion.parse(line)


def test_an_unknown_metadata_version_is_refused():
    with pytest.raises(UnknownFlinkVersionError, match="metadata version 7.*supported: 1.18"):
        FlinkVersion.for_metadata_version(7)


@pytest.mark.parametrize("version,case", [(v, c) for v, c in VERSION_CASES if c == "long-hashmap-canonical"])
def test_a_savepoint_goes_back_as_the_version_it_came_from(version, case):
    sp = Savepoint.open(savepoint(case, version))
    # a line's savepoint says only its metadata version: 1.18-1.20 go back as 1.20, 2.1-2.3 as 2.3 (same layouts)
    assert sp.flink_version == FlinkVersion.for_metadata_version(FlinkVersion.parse(version).metadata_version)


@pytest.mark.parametrize("line", SUPPORTED)
def test_written_metadata_has_each_lines_layout(line, tmp_path):
    out = write_flink(savepoint("long-hashmap-canonical"), tmp_path / "sp", flink_version=line)
    md = read_metadata(out)
    assert md.version == FlinkVersion.parse(line).metadata_version
    counter = next(o for o in md.operators if o.operator_id == "0da08f51eaa85fc298e176a139b3649a")
    if md.version >= 5:  # uids and names since Flink 2.0
        assert counter.verified_uid == "counter"
    else:  # V4 has neither: Flink 1.x matches operators by their hash only
        assert counter.uid == "" and counter.name == ""


def test_unknown_target_version_is_refused_before_anything_is_written(tmp_path):
    with pytest.raises(UnknownFlinkVersionError, match="Flink 1.17 is not a version"):
        write_flink(savepoint("long-hashmap-canonical"), tmp_path / "sp", flink_version="1.17")
    assert not list(tmp_path.iterdir())


# -- serializers a target line lacks -----------------------------------------------------------------------
def _versioned(cls: str, version: int = 3, nested: tuple[bytes, ...] = (), outer: int | None = None) -> bytes:
    """Snapshot bytes as Flink writes them: utf class, version, [composite magic, outer version, nested]."""
    out = DataOutput().utf(cls).i32(version)
    if outer is not None:
        out.i32(COMPOSITE_MAGIC).i32(outer).i32(NESTED_MAGIC).i32(1).i32(len(nested))
        for n in nested:
            out.raw(n)
    return bytes(out.buf)


def _type(raw: bytes) -> FlinkType:
    return read_versioned(DataInput(raw, "a test snapshot"), "a test state")


def test_a_flink_2_set_serializer_is_not_restorable_by_1_x():
    """`SetSerializer` came with Flink 2.0 (built-in Java collections): 1.x has no such class."""
    tags = _type(_versioned(SET, nested=(_versioned(STRING),), outer=1))
    assert tags.kind == "binary" and tags.children[0].snapshot_class == STRING  # statekit keeps it as bytes
    for line in ("2.0", "2.1", "2.2", "2.3"):
        assert not list(serializer_problems(FlinkVersion.parse(line), tags))
        check_serializers(FlinkVersion.parse(line), [("operator tags, keyed state 'tags'", tags)])
    with pytest.raises(FlinkVersionMismatchError) as e:
        check_serializers(FlinkVersion.parse("1.20"), [("operator tags, keyed state 'tags'", tags)])
    msg = str(e.value)
    assert "Flink 1.20 cannot restore" in msg and "operator tags, keyed state 'tags'" in msg
    assert "SetSerializerSnapshot" in msg and "exists only in Flink 2.0-2.3" in msg
    assert "--flink-version 2.0 or 2.1 or 2.2 or 2.3" in msg and "Nothing was written" in msg
    assert len(e.value.problems) == 1


def test_a_nested_serializer_is_judged_too():
    """A list of Sets: the outer ListSerializer exists everywhere, the Set inside it does not."""
    nested = _type(_versioned(_BASE + "ListSerializerSnapshot", outer=1,
                              nested=(_versioned(SET, nested=(_versioned(STRING),), outer=1),)))
    assert nested.kind == "list"
    (why,) = serializer_problems(FlinkVersion.parse("1.19"), nested)
    assert "SetSerializerSnapshot" in why and "Flink 1.19 has no such class" in why


def test_a_1_x_only_serializer_is_not_restorable_by_2_x():
    either = _type(_versioned(EITHER, version=2))
    check_serializers(FlinkVersion.parse("1.20"), [("operator e, keyed state 'either'", either)])
    with pytest.raises(FlinkVersionMismatchError, match="exists only in Flink 1.18-1.20.*--flink-version 1.18 or 1.19 "
                                                        "or 1.20"):
        check_serializers(FlinkVersion.parse("2.0"), [("operator e, keyed state 'either'", either)])


def test_a_snapshot_version_newer_than_the_target_writes_is_refused():
    newer = _type(_versioned(STRING, version=4))
    with pytest.raises(FlinkVersionMismatchError, match="snapshot version 4.*reads it up to version 3") as e:
        check_serializers(FlinkVersion.parse("2.3"), [("operator x, keyed state 'name'", newer)])
    assert "no Flink line statekit writes for has every one of them" in str(e.value)


def test_serializers_the_table_does_not_know_are_the_jobs_own():
    user = _type(_versioned("com.example.MoneySerializer$Snapshot", version=1))
    for line in SUPPORTED:
        check_serializers(FlinkVersion.parse(line), [("operator x, keyed state 'money'", user)])


@pytest.mark.parametrize("version,case", [(v, c) for v, c in VERSION_CASES if "canonical" in c])
def test_every_corpus_serializer_is_restorable_by_its_own_line(version, case):
    """Drift guard: the generated table agrees with what real Flink of each line wrote (its classes, its versions)."""
    from statekit.savepoint.flink_out import carried_serializers

    sp = Savepoint.open(savepoint(case, version))
    line = FlinkVersion.parse(version)
    known = 0
    for meta in sp.operators:
        carried = carried_serializers(sp, meta)
        if carried is None:
            continue
        for t in _types(carried):
            assert not list(serializer_problems(line, t)), (case, meta.uid_hash, t.serializer)
            known += t.snapshot_class in SNAPSHOTS
    assert known


def _types(carried) -> list[FlinkType]:
    """Every serializer one operator's Flink snapshots carry: key, namespace, and each state's and timer's."""
    metas = [*carried.states.values(), *carried.timers, *carried.operator_states.values()]
    out = [t for m in metas for t in m.serializers.values()]
    return out + [t for t in (carried.key, carried.namespace) if t is not None]


# -- a real Flink 2.3 savepoint with a serializer Flink 1.x lacks (make_set_state.py) ----------------------
SET_STATE = FIXTURES / "snapshots" / "set-state-2.3.0"


def test_real_set_state_of_flink_2_is_refused_for_every_1_x_line_and_nothing_is_written(tmp_path):
    source = SET_STATE / "savepoint"
    sp = Savepoint.open(source)
    assert {s.name: s.type for s in sp.operator("tags").keyed_states} == {"tags": "binary", "count": "bigint"}
    for line in ("1.18", "1.19", "1.20"):
        with pytest.raises(FlinkVersionMismatchError) as e:
            write_flink(source, tmp_path / line, flink_version=line)
        msg = str(e.value)
        assert f"Flink {line} cannot restore" in msg and "operator tags, keyed state 'tags'" in msg
        assert "SetSerializerSnapshot" in msg and "exists only in Flink 2.0-2.3" in msg and "count" not in msg
    assert not list(tmp_path.iterdir())  # no target, no staging directory


@pytest.mark.parametrize("line", ["2.0", "2.3"])
def test_real_set_state_is_written_for_2_x_byte_for_byte(line, tmp_path):
    source = Savepoint.open(SET_STATE / "savepoint")
    out = Savepoint.open(write_flink(source, tmp_path / "sp", flink_version=line))
    assert read_metadata(out.path).version == FlinkVersion.parse(line).metadata_version
    want = {e["key"]: e["count"] for e in json.loads((SET_STATE / "expected.json").read_text())["operators"]["tags"]["keys"]}
    got = {r["key"]: r for r in out.keyed_table("tags").to_pylist()}
    assert {k: r["count"] for k, r in got.items()} == want
    before = {r["key"]: r["tags"] for r in source.keyed_table("tags").to_pylist()}
    assert {k: r["tags"] for k, r in got.items()} == before  # the Set bytes carried unchanged
    for r in got.values():  # each Set's element strings are in its bytes
        assert b"t0" in r["tags"]


def test_set_state_carried_through_statekits_format_is_refused_for_1_20_too(tmp_path):
    """Converted into statekit's format the serializers ride in the manifest; the target check still applies."""
    from statekit.savepoint.convert import convert_to_statekit

    converted = convert_to_statekit(SET_STATE / "savepoint", tmp_path / "statekit", uids=["tags"])
    with pytest.raises(FlinkVersionMismatchError, match="Flink 1.20 cannot restore.*keyed state 'tags'"):
        write_flink(converted, tmp_path / "flink", flink_version="1.20")
    assert not (tmp_path / "flink").exists()
    write_flink(converted, tmp_path / "flink")  # by default: 2.3, where the state came from


def test_cli_convert_names_the_refusal(tmp_path):
    from typer.testing import CliRunner

    from statekit_cli.app import app

    result = CliRunner().invoke(app, ["convert", str(SET_STATE / "savepoint"), str(tmp_path / "out"), "--to", "flink",
                                      "--flink-version", "1.20"])
    assert result.exit_code != 0
    assert "FlinkVersionMismatchError" in result.output and "SetSerializerSnapshot" in result.output
    assert not (tmp_path / "out").exists()
    result = CliRunner().invoke(app, ["convert", str(SET_STATE / "savepoint"), str(tmp_path / "out"), "--to", "flink",
                                      "--flink-version", "1.17"])
    assert result.exit_code != 0 and "UnknownFlinkVersionError" in result.output and "1.18, 1.19" in result.output


@pytest.mark.spark
def test_spark_writer_refuses_the_set_state_for_1_20_and_leaves_nothing(spark, tmp_path):
    from statekit.spark import SavepointWriter

    writer = SavepointWriter.from_existing_savepoint(spark, SET_STATE / "savepoint")
    with pytest.raises(FlinkVersionMismatchError, match="Flink 1.20 cannot restore.*keyed state 'tags'.*SetSerializer"):
        writer.write(tmp_path / "out", format="flink", flink_version="1.20")
    assert not list(tmp_path.iterdir())  # no target, no staged statekit savepoint, no staging directory
    out = SavepointWriter.from_existing_savepoint(spark, SET_STATE / "savepoint").write(tmp_path / "out", format="flink")
    assert read_metadata(out).version == 6  # by default: 2.3, where the state came from
