"""A writer accepts only what its reader reads: random operators (uids, names, state names of every length and
kind of text) written through every writer either read back as written or are refused before anything is
written, with a typed error - never a savepoint its reader calls damaged."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from statekit.errors import InvalidArgumentError, StatekitError, UnreadableOutputError
from statekit.format.flink.utf import MAX_UTF_BYTES, modified_utf8
from statekit.format.manifest_schema import MAX_TEXT, text_problem
from statekit.savepoint import Savepoint, SavepointBuilder, check
from statekit.savepoint.flink_out import write_flink
from statekit.state import ValueStateDescriptor

# Text of every kind: ASCII, 2- and 3-byte characters, characters outside the BMP (a surrogate pair in
# Java), NUL (two bytes in modified UTF-8) and lone surrogates (which no manifest holds).
CHARS = st.sampled_from(["u", "é", "€", "\U0001f600", "\x00", "\ud800", "/", " "])
LENGTHS = st.sampled_from([1, 2, 17, 21_845, 21_846, 32_767, 32_768, 65_535, 65_536, 65_537, 100_000])
LONG = st.builds(lambda c, n: c * n, CHARS, LENGTHS)
SHORT = st.text(st.characters(codec="utf-8", exclude_characters="\x00"), min_size=1, max_size=12)
TEXT = st.one_of(SHORT, LONG, st.text(min_size=1, max_size=8))
STATE = st.one_of(st.sampled_from(["count", "c", "état"]), TEXT)


def statekit_accepts(text: str | None) -> bool:
    return text is None or text_problem(text) is None


def flink_accepts(text: str | None) -> bool:
    return text is None or len(modified_utf8(text)) <= MAX_UTF_BYTES


def write_statekit(path: Path, uid: str, name: str | None, state: str) -> None:
    with SavepointBuilder(path, checkpoint_id=3) as b:
        op = b.add_operator(uid, name=name, parallelism=1, max_parallelism=8, key_type="bigint",
                            keyed_states=[ValueStateDescriptor(state, "bigint")])
        op.write_keyed(pa.table({"key": [1, 2, 3], state: [10, 20, 30]}))


SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


@SETTINGS
@given(uid=TEXT, name=st.one_of(st.none(), TEXT), state=STATE)
# the edges, each time: the manifest's limit in characters, and Flink's in bytes of modified UTF-8
@example(uid="u" * MAX_TEXT, name=None, state="count")  # statekit and Flink both hold it
@example(uid="u" * (MAX_TEXT + 1), name=None, state="count")  # neither
@example(uid="€" * 21_845, name=None, state="count")  # 65,535 bytes: Flink holds it
@example(uid="€" * 21_846, name=None, state="count")  # 65,538 bytes: statekit holds it, Flink does not
@example(uid="counter", name="\x00" * 32_768, state="count")  # NUL: refused by the manifest's reader
@example(uid="counter", name="\U0001f600" * 10_923, state="count")  # a surrogate pair is 6 bytes in Flink
@example(uid="counter", name=None, state="\ud800")  # a lone surrogate
def test_statekit_and_flink_writers_write_only_what_their_readers_read(tmp_path_factory, uid, name, state):
    root = tmp_path_factory.mktemp("w")
    sp, flink = root / "sp", root / "flink"
    readable = statekit_accepts(uid) and statekit_accepts(name) and statekit_accepts(state)
    try:
        write_statekit(sp, uid, name, state)
    except StatekitError as exc:
        assert not sp.exists() and os.listdir(root) == [], os.listdir(root)
        # refused for the text a reader refuses, or for a state name the builder refuses on its own
        assert not readable or isinstance(exc, InvalidArgumentError), exc
        assert not readable or state in ("key", "key_group", "namespace") or not state.strip() or "/" in state, exc
        return
    assert readable, f"wrote uid {uid[:20]!r} ({len(uid)}) / name / state {state[:20]!r} that the reader refuses"
    assert check(sp).ok, check(sp)
    meta = Savepoint.open(sp).operator(uid)
    assert (meta.uid, meta.name, meta.keyed_states[0].name) == (uid, name or uid, state)
    assert sorted(Savepoint.open(sp).keyed_table(uid).column(state).to_pylist()) == [10, 20, 30]

    fits = flink_accepts(uid) and flink_accepts(name or uid)
    try:
        write_flink(sp, flink)
    except UnreadableOutputError as exc:  # a uid, name or state name Flink's writeUTF cannot hold
        assert not (fits and flink_accepts(state)) and not flink.exists(), exc
        assert "Flink's metadata holds at most 65,535" in str(exc)
        assert os.listdir(root) == ["sp"], os.listdir(root)  # no staging left behind
        return
    assert fits and flink_accepts(state), f"Flink's writeUTF cannot hold uid {uid[:20]!r} ({len(uid)})"
    back = Savepoint.open(flink).operator(uid)
    assert (back.uid, back.name) == (uid, name or uid)
    assert check(flink).ok


def test_the_reported_rename_is_refused_and_writes_nothing(tmp_path):
    """`statekit rename-uid SP OUT --new-uid <100,000 x u> --apply` exited 0 and wrote what `check` called damaged."""
    write_statekit(tmp_path / "sp", "counter", None, "count")
    cli = Path(sys.executable).parent / "statekit"
    r = subprocess.run([str(cli), "rename-uid", str(tmp_path / "sp"), str(tmp_path / "out"), "--uid", "counter",
                        "--new-uid", "u" * 100_000, "--apply"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "longer than 65,536 characters" in r.stderr, r.stderr
    assert not (tmp_path / "out").exists()
    # exactly the manifest's limit is accepted, and read back
    r = subprocess.run([str(cli), "rename-uid", str(tmp_path / "sp"), str(tmp_path / "out"), "--uid", "counter",
                        "--new-uid", "u" * MAX_TEXT, "--apply"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert check(tmp_path / "out").ok and Savepoint.open(tmp_path / "out").operators[0].uid == "u" * MAX_TEXT


def test_a_manifest_the_reader_refuses_is_never_published(tmp_path):
    """The commit-time guard: the reader's own checks run on the manifest before it is written (a name set on
    the operator's writer after `add_operator` checked it)."""
    with pytest.raises(UnreadableOutputError, match=r"operators\[0\]\.name.*longer than 65536"):
        with SavepointBuilder(tmp_path / "sp", checkpoint_id=1) as b:
            op = b.add_operator("counter", key_type="bigint", keyed_states=[ValueStateDescriptor("count", "bigint")])
            op.write_keyed(pa.table({"key": [1], "count": [1]}))
            op.name = "n" * (MAX_TEXT + 1)
    assert os.listdir(tmp_path) == []


@pytest.mark.spark
@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(new_uid=st.one_of(SHORT, LONG))
def test_spark_writers_write_only_what_their_readers_read(spark, tmp_path_factory, new_uid):
    from statekit.spark import SavepointWriter

    root = tmp_path_factory.mktemp("s")
    write_statekit(root / "sp", "counter", None, "count")
    for fmt in ("statekit", "flink"):
        target = root / fmt
        readable = statekit_accepts(new_uid) and (fmt == "statekit" or flink_accepts(new_uid))
        try:
            (SavepointWriter.from_existing_savepoint(spark, root / "sp")
             .change_operator_identifier("counter", new_uid).write(target, format=fmt))
        except StatekitError as exc:
            assert not readable and not target.exists(), exc
            continue
        assert readable and check(target).ok
        assert Savepoint.open(target).operator(new_uid).uid == new_uid
